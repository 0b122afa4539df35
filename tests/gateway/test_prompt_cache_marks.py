"""Ben-Util's per-item requests mark their shared prefix for a provider that caches only marked
prefixes (Anthropic's ``cache_control``), and send one request per prefix first: the mark is how
a request travels (the cache key and the rendered text are unchanged, other providers get no
mark), and the siblings of a prefix wait for its first request, so the prefix is written once
and read by the rest."""

from __future__ import annotations

import asyncio
import json

from tasks.core.items import Item
from tasks.core.judges import TurnView
from tasks.engine.judge_calls import BatchJudge, run_calls
from tasks.gateway import Gateway
from tasks.gateway.result import CallResult
from tasks.gateway.transport import mark_cache_prefix, needs_cache_mark, request_kwargs
from tasks.judges.benutil import BenUtilJudge, shared_prefix
from tasks.judges.prompts import benutil_messages
from tests.support.batch import gateway
from tests.support.factories import model_spec

ITEM = Item("it", 0, {"question": "How?"}, {"checklist": ["Does it say X?", "Does it say Y?",
                                                           "Does it say Z?"]})


def _turn(episode, response):
    return TurnView(item=ITEM, condition="c", episode_id=episode, position=1, model_turn=1,
                    prompt="How?", response=response, history=(), is_last=True)


def test_the_prefix_is_the_instructions_query_and_response_and_only_anthropic_is_marked():
    a = benutil_messages("How?", "It says X.", "Does it say X?")
    b = benutil_messages("How?", "It says X.", "Does it say Y?")
    n = shared_prefix(a[0]["content"])
    # Everything up to the response's END line is shared; the item follows it.
    assert a[0]["content"][:n] == b[0]["content"][:n]
    assert a[0]["content"][:n].endswith(">>>") and "<<<END RESPONSE " in a[0]["content"][n - 40:n]
    assert "Does it say X?" in a[0]["content"][n:]

    claude = model_spec("c", model="anthropic/claude-sonnet-4-20250514")
    gpt = model_spec("g", model="openai/gpt-4o")
    gemini = model_spec("m", model="gemini/gemini-2.5-flash")
    assert [needs_cache_mark(s.model) for s in (claude, gpt, gemini)] == [True, False, False]
    _, sent = request_kwargs(claude, "benutil_judge", a, None, "k", cache_prefix=n)
    assert sent[0]["content"] == [
        {"type": "text", "text": a[0]["content"][:n], "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": a[0]["content"][n:]}]
    # The same text in the same order; the rendered messages are left as they were.
    assert "".join(b["text"] for b in sent[0]["content"]) == a[0]["content"]
    assert isinstance(a[0]["content"], str)
    for spec in (gpt, gemini):  # no mark: OpenAI and Gemini cache unmarked prefixes
        assert request_kwargs(spec, "benutil_judge", a, None, "k", cache_prefix=n)[1] == a
    # A prefix of nothing, or of the whole message, marks nothing.
    assert mark_cache_prefix(a, 0) == a and mark_cache_prefix(a, len(a[0]["content"])) == a
    # The cache key holds the messages as rendered: a marked request is keyed as before.
    assert Gateway.chat_key(claude, a) == Gateway.chat_key(claude, [dict(m) for m in a])


class _SlowGateway:
    """Answers after a short wait and records when each request started and ended."""

    def __init__(self):
        self.events: list[tuple[str, str, str]] = []  # (start|end, response, item)

    async def chat(self, spec, role, messages, *, schema=None, sample_key=None, live=False,
                   cache_prefix=None):
        text = messages[0]["content"]
        who = ("R1" if "first answer" in text else "R2", text.rsplit("Does it say ", 1)[1][0])
        self.events.append(("start", *who))
        await asyncio.sleep(0.02)
        self.events.append(("end", *who))
        return CallResult(call_hash=f"{who}", content='{"evidence": "", "fulfilled": false}',
                          parsed=schema.model_validate({"evidence": "", "fulfilled": False}))


def _run(spec):
    kind = BatchJudge(BenUtilJudge(), [spec], "set")
    for t in (_turn("e1", "The first answer."), _turn("e2", "The second answer.")):
        kind.add(kind.requests(t))
    gw = _SlowGateway()
    asyncio.run(run_calls(gw, [kind]))
    return gw.events


def test_the_first_request_of_a_prefix_goes_alone_where_the_provider_needs_a_mark():
    events = _run(model_spec("c", model="anthropic/claude-sonnet-4-20250514"))
    for response in ("R1", "R2"):
        first_end = events.index(("end", response, "X"))
        later = [events.index(("start", response, i)) for i in "YZ"]
        assert all(i > first_end for i in later), events  # Y and Z wait for X's answer
    # The two responses' first requests do not wait for each other.
    assert events[:2] == [("start", "R1", "X"), ("start", "R2", "X")]
    # Unmarked providers (and batch entries, whose lines go unmarked) send all at once.
    for spec in (model_spec("g", model="openai/gpt-4o"),
                 model_spec("c", model="anthropic/claude-sonnet-4-20250514", batch=True)):
        events = _run(spec)
        assert [e for e in events[:6]] == [("start", r, i) for r in ("R1", "R2") for i in "XYZ"]


def test_the_mark_reaches_anthropics_api_and_the_answer_is_the_same(llm_server, tmp_path):
    llm_server.scripts["benutil_judge"] = lambda body: json.dumps(
        {"evidence": "", "fulfilled": False})
    spec = model_spec("c", model="anthropic/claude-sonnet-4-20250514",
                      api_base=llm_server.anthropic_base, max_tokens=64)
    kind = BatchJudge(BenUtilJudge(), [spec], "set")
    kind.add(kind.requests(_turn("e1", "The first answer.")))
    gw = gateway(tmp_path)
    asyncio.run(run_calls(gw, [kind]))
    assert all(r.ok for r in kind.results)
    bodies = [q["body"] for q in llm_server.requests if q["role"] == "benutil_judge"]
    assert len(bodies) == 3
    for body in bodies:
        blocks = body["messages"][0]["content"]
        assert [b.get("cache_control") for b in blocks] == [{"type": "ephemeral"}, None]
        assert blocks[0]["text"].endswith(">>>") and "Does it say" in blocks[1]["text"]
