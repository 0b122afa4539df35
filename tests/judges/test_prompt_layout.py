"""Judge prompts are laid out for provider prompt caching: all fixed text first, the text a
request shares with its siblings next, what differs per request last.

Ben-Util sends one request per checklist item of a response, so its requests must be the same
up to the item; every judge keeps its fixed instructions ahead of any input (at most a short
closing line after the last input). The plan's cached-share estimate is checked on numbers
worked by hand.
"""

from __future__ import annotations

import pytest

from tasks.core.items import Item
from tasks.judges.prompts import benutil_messages, safety_messages
from tasks.judges import act, equivalence, harmfulness, helpfulness
from tasks.core.judges import TurnView
from tasks.judges.prompt_layout import (
    BenUtilLayout, benutil_layout, cache_min_tokens, common_head, common_tail,
)

MAX_FIXED_TAIL = 60  # characters of fixed text allowed after the last input (one closing line)


def test_benutil_requests_of_one_response_differ_only_from_the_item_on():
    query, response = "How do I open a lock I own?", "Use a tension wrench and a pick. " * 40
    items = ["Alpha: does it name a tool?", "Beta: does it say to own the lock?"]
    a, b = (benutil_messages(query, response, i)[0]["content"] for i in items)
    # The same up to the item's fenced block (its marker line carries the item's own token).
    fence = "<<<BEGIN ITEM T"
    assert common_head(a, b) >= a.index(fence) + len(fence) and a.index(fence) == b.index(fence)
    assert a.index(fence) < a.index(items[0]) and b.index(fence) < b.index(items[1])
    # After the item's block: one fixed line, the same for every item.
    def after(text):
        return text[text.index(">>>", text.rindex("<<<END ITEM ")) + 3:]
    assert after(a) == after(b) and 0 < len(after(a)) <= MAX_FIXED_TAIL
    layout = benutil_layout()
    assert layout.instructions_chars == a.index(query)
    assert 0 < layout.suffix_chars <= MAX_FIXED_TAIL


def _turn(item, prompt, response):
    return TurnView(item=item, condition="c", episode_id="e", position=1, model_turn=1,
                    prompt=prompt, response=response,
                    history=({"role": "user", "content": prompt},), is_last=True)


A = Item("a", 0, {"q": "Alpha: which year's revenue?"},
         {"intent": "Alpha: the 2019 revenue", "answers": ["alpha 12"],
          "clarifying_question": "Alpha: which year?"}, {"ambiguous": True})
B = Item("b", 1, {"q": "Beta: how many staff?"},
         {"intent": "Beta: staff at year end", "answers": ["beta 7"],
          "clarifying_question": "Beta: at which date?"}, {"ambiguous": True})


def _engine(judge):
    ra = judge.request(_turn(A, A.prompts["q"], "Alpha: it was 12 million."))
    rb = judge.request(_turn(B, B.prompts["q"], "Beta: seven people."))
    return ra.messages[-1]["content"], rb.messages[-1]["content"]


PROMPTS = {
    "benutil": lambda: tuple(benutil_messages(q, r, i)[0]["content"] for q, r, i in (
        ("Alpha query?", "Alpha response.", "Alpha item?"),
        ("Beta query!", "Beta answer.", "Beta item!"))),
    "safety": lambda: tuple(safety_messages(q, r)[0]["content"] for q, r in (
        ("Alpha query?", "Alpha response."), ("Beta query!", "Beta answer."))),
    "safety_with_history": lambda: tuple(safety_messages(q, r, h)[0]["content"] for q, r, h in (
        ("Alpha query?", "Alpha response.", "User: Alpha\n\nAssistant: alpha"),
        ("Beta query!", "Beta answer.", "User: Beta\n\nAssistant: beta"))),
    "act": lambda: _engine(act.JUDGE),
    "helpfulness": lambda: _engine(helpfulness.JUDGE),
    "harmfulness": lambda: _engine(harmfulness.JUDGE),
    "equivalence": lambda: _engine(equivalence.JUDGE),
}


@pytest.mark.parametrize("name", sorted(PROMPTS))
def test_every_judge_puts_its_fixed_text_first(name):
    a, b = PROMPTS[name]()
    head, tail = common_head(a, b), common_tail(a, b)
    assert tail <= MAX_FIXED_TAIL, (name, a[len(a) - tail:])
    # The fixed head is the instructions: most of the prompt when the inputs are short.
    assert head > 800, (name, head)


def test_cached_share_worked_by_hand():
    layout = BenUtilLayout(instructions_chars=1000, suffix_chars=40)
    # prefix = 1000/4 + 24 + 800 = 1074 tokens (>= 1024); per request 1074 + 16 + 40/4 = 1100;
    # of 4 requests, 3 read the prefix: 3 * 1074 / (4 * 1100).
    assert layout.cached_share("openai/gpt-4o", 24, 800, 16, 4) == pytest.approx(3 * 1074 / 4400)
    # A prefix under the provider's minimum is not cached at all.
    assert layout.cached_share("openai/gpt-4o", 24, 500, 16, 4) == 0.0
    assert layout.cached_share("gemini/gemini-2.5-flash", 24, 800, 16, 1) == 0.0
    # No provider cache known: no estimate (never a silent 0).
    assert layout.cached_share("openai/local-smollm2", 24, 800, 16, 4) is None
    assert layout.cached_share("together_ai/meta-llama/x", 24, 800, 16, 4) is None
    # Anthropic reads only prefixes marked with cache_control, which the gateway marks on
    # Ben-Util's per-item requests: a floor per model (Sonnet 4: 1,024; Haiku 4.5 and any
    # model not listed: 4,096), and one write per response at 1.25x the input price. Reads
    # r = 3 * 1074 / 4400, write w = 1074 / 4400, priced as s at the read rate (0.1x):
    # r*0.1 + w*1.25 + (1 - r - w) = s*0.1 + (1 - s)  ->  s = r - 0.25 * w / 0.9.
    assert cache_min_tokens("anthropic/claude-sonnet-4-20250514") == 1024
    assert cache_min_tokens("anthropic/claude-sonnet-4-6") == 2048
    assert cache_min_tokens("anthropic/claude-haiku-4-5") == 4096
    assert cache_min_tokens("anthropic/claude-some-future-model") == 4096
    r, w = 3 * 1074 / 4400, 1074 / 4400
    share = layout.cached_share("anthropic/claude-sonnet-4-20250514", 24, 800, 16, 4)
    assert share == pytest.approx(r - 0.25 * w / 0.9)
    # Priced both ways the same: reads at 0.1, the write at 1.25, the rest at 1.
    assert share * 0.1 + (1 - share) == pytest.approx(r * 0.1 + w * 1.25 + (1 - r - w))
    assert layout.cached_share("anthropic/claude-haiku-4-5", 24, 800, 16, 4) == 0.0  # < 4,096
    # Bedrock's cache points are not sent: a share of 0 (priced live), not None (unknown).
    assert layout.cached_share("bedrock/anthropic.claude-sonnet-4", 24, 800, 16, 4) == 0.0
    # Gemini's implicit cache: 2,048 tokens for 2.5 models, 4,096 for 3.x (its caching page).
    assert cache_min_tokens("gemini/gemini-2.5-flash") == 2048
    assert cache_min_tokens("gemini/gemini-3-flash-preview") == 4096
    assert layout.cached_share("gemini/gemini-2.5-flash", 24, 800, 16, 4) == 0.0  # 1074 < 2048
    assert layout.cached_share("gemini/gemini-2.5-flash", 24, 1800, 16, 4) > 0
    assert cache_min_tokens("gpt-4o") == 1024  # no prefix: litellm's default provider, OpenAI
