"""Length limits on untrusted text (issue #32, item 4; tasks/untrusted.py).

- a model-written turn longer than ``limits.prompt_turn_chars`` is cut in the prompts that
  show it (judges, simulator, move checker), said so in the prompt and counted; the stored
  turn stays whole; the default leaves every config's hash (and so its run ids) unchanged;
- report.html and the annotation pages fold a long turn behind "show more": a 1 MB line of
  mixed scripts (tens of seconds of layout in Chromium when shown whole) opens in a second.
"""

from __future__ import annotations

import asyncio
import os
import time

import pytest
import yaml

from tasks import untrusted
from tasks.untrusted import DEFAULT_TURN_CHARS, cap_transcript, cap_turn
from tests.support.untrusted import hostile_line


@pytest.fixture(autouse=True)
def _fresh_cap():
    untrusted.configure(None)
    yield
    untrusted.configure(None)


# ----------------------------------------------------------------------------- the cap

def test_cap_turn_keeps_short_text_and_cuts_long_text_saying_so():
    short = "x" * DEFAULT_TURN_CHARS
    assert cap_turn(short) is short and cap_turn(None) is None
    long = "y" * (DEFAULT_TURN_CHARS + 12_345)
    cut = cap_turn(long)
    assert cut.startswith("y" * DEFAULT_TURN_CHARS)
    assert cut[DEFAULT_TURN_CHARS:] == ("\n[CarryOnBench cut this turn here: 12,345 more characters not "
                                        "shown (limits.prompt_turn_chars = 100,000)]")
    assert untrusted.cuts() == 1
    cap_turn(long)  # the same turn in another prompt: one turn cut, not two
    assert untrusted.cuts() == 1
    cap_turn(long + "z")
    assert untrusted.cuts() == 2


def test_cap_transcript_copies_only_cut_turns():
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a" * 5000},
             {"role": "assistant", "content": None}]
    untrusted.configure(untrusted.LimitsConfig(prompt_turn_chars=1000))
    out = cap_transcript(turns)
    assert out[0] is turns[0] and out[2] is turns[2]
    assert out[1]["content"].startswith("a" * 1000) and "4,000 more characters" in out[1]["content"]
    assert turns[1]["content"] == "a" * 5000  # the caller's (stored) turn is untouched


def test_judge_prompts_cut_a_megabyte_and_stay_fenced():
    from tasks.judges.prompts import benutil_messages, format_history, safety_messages

    response = hostile_line()
    text = benutil_messages("the query", response, "ITEM-LAST")[0]["content"]
    assert len(text) < DEFAULT_TURN_CHARS + 10_000
    assert "CarryOnBench cut this turn here: 900,000 more characters" in text
    assert text.rfind("ITEM-LAST") > text.rfind("<<<END RESPONSE")  # the item stays last
    begin, end = text.index("<<<BEGIN RESPONSE"), text.index("<<<END RESPONSE")
    assert begin < text.index("CarryOnBench cut this turn") < end  # the note is inside the fence
    safety = safety_messages("q", response, format_history([("user", "u"), ("assistant", response)]))
    assert len(safety[0]["content"]) < 2 * DEFAULT_TURN_CHARS + 10_000


def test_short_prompts_are_byte_identical():
    """Below the cap nothing changes: existing homes' prompts (and cache keys) stay the same."""
    from tasks.judges.prompts import benutil_messages, fence

    import prompts
    from tasks.judges.prompts import BENUTIL_TEMPLATE

    token, safe = fence("an ordinary answer")
    expected = prompts.render(BENUTIL_TEMPLATE, query="q", response=safe, response_token=token, item="i")
    assert benutil_messages("q", "an ordinary answer", "i")[0]["content"] == expected


def test_simulator_and_move_checker_prompts_are_capped():
    from tasks.users.move_checker import render
    from tasks.users.scripted import Scripted

    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": hostile_line()}]
    checker = render("rephrasing", "an intent", history, "z" * (DEFAULT_TURN_CHARS * 2))
    assert len(checker) < 2 * DEFAULT_TURN_CHARS + 20_000
    assert checker.count("CarryOnBench cut this turn here") == 2

    from tests.support.factories import FakeGateway

    class Cond:
        script = None

    gw = FakeGateway(lambda call: "a user turn")
    turn = asyncio.run(Scripted().write(gw, None, None, Cond(), "rephrasing", history, None))
    assert turn.content == "a user turn"
    prompt = gw.calls[0].messages[0]["content"]
    assert len(prompt) < DEFAULT_TURN_CHARS + 20_000 and "CarryOnBench cut this turn here" in prompt


def test_limits_config_default_keeps_the_hash_and_a_change_is_hashed(tmp_path):
    from tasks.config import load_config
    from tests.support.factories import base_config

    def hash_of(**over):
        path = tmp_path / f"c{len(over)}-{over.get('limits', {}).get('prompt_turn_chars', 0)}.yaml"
        path.write_text(yaml.safe_dump(base_config("http://127.0.0.1:9/v1", tmp_path / "home", **over)))
        return load_config(str(path))

    plain = hash_of()
    same = hash_of(limits={"prompt_turn_chars": DEFAULT_TURN_CHARS})
    other = hash_of(limits={"prompt_turn_chars": 5000})
    assert plain.config_hash() == same.config_hash() != other.config_hash()
    assert other.limits.prompt_turn_chars == 5000
    from tasks.config import ConfigError

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(base_config("http://127.0.0.1:9/v1", tmp_path / "home",
                                              limits={"prompt_turn_chars": 10})))
    with pytest.raises(ConfigError, match="prompt_turn_chars"):
        load_config(str(bad))


# ----------------------------------------------------------------------------- pages

def _report_with_long_turn(cfg, text: str):
    from tasks.benchmarks.carryon.report.writer import write_report
    from tests.support.report import build_synthetic

    wh, run_id = build_synthetic(cfg.home_path, n_targets=1, n_queries=2)
    first = wh.query("SELECT conversation_id FROM conversations ORDER BY target, query_id, "
                     "condition = 'oracle' DESC, condition, length, flow_id LIMIT 1")[0]["conversation_id"]
    wh.query("UPDATE episode_turns SET content = ? WHERE episode_id = ? AND role = 'assistant'",
             [text, first])
    t0 = time.perf_counter()
    folder = write_report(cfg, run_id)
    return folder / "report.html", time.perf_counter() - t0


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_report_with_a_megabyte_line_folds_it(write_config):
    from tasks.config import load_config

    cfg = load_config(write_config())
    html, seconds = _report_with_long_turn(cfg, hostile_line())
    page = html.read_text(encoding="utf-8")
    assert "function carryonFoldedText" in page and 'carryonFoldedText("text"' in page
    assert "</script>&amp;" not in page.split('id="browser-data">', 1)[1].split("</script>", 1)[0]
    assert seconds < 60, seconds  # generous: the whole report, figures included


def test_validation_page_folds_long_turns():
    from tasks.validation.page import page_html

    page = page_html({"format": "x", "sample_id": "s", "sample_uid": "u", "kind": "safety",
                      "annotator": "a", "scale": [[1, "one"]], "instructions": "i", "units": []})
    assert "function carryonFoldedText" in page and "carryonFoldedText('text'" in page


# ----------------------------------------------------------------------------- in Chromium

@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists("/usr/bin/chromium"), reason="needs /usr/bin/chromium")
def test_megabyte_line_opens_quickly_in_chromium(write_config, tmp_path, chromium):
    """The report and an annotation page holding a 1 MB line of mixed scripts load and lay
    out in under a second or so each; "show more" adds a part, and no payload runs."""
    from tasks.config import load_config
    from tasks.validation.page import page_html
    from tests.support.browser import _open

    text = hostile_line() + "<img src=x onerror=window.__pwned=1><script>window.__pwned=1</script>"
    cfg = load_config(write_config())
    report, _ = _report_with_long_turn(cfg, text)
    annotate = tmp_path / "annotate.html"
    annotate.write_text(page_html({
        "format": "x", "sample_id": "s", "sample_uid": "u", "kind": "safety", "annotator": "a",
        "scale": [[1, "one"], [5, "five"]], "instructions": "rate", "units": [{
            "unit_id": 1, "position": 1, "conversations": [{
                "conversation_id": "c", "query": "q", "items": [], "turns": [
                    {"position": 0, "role": "user", "model_turn": 1, "move": None, "content": "q"},
                    {"position": 1, "role": "assistant", "model_turn": 1, "move": None,
                     "content": text}]}]}]}), encoding="utf-8")

    async def check(page):
        t0 = time.perf_counter()
        height = await page.eval("document.body.offsetHeight")  # forces the layout
        layout = time.perf_counter() - t0
        buttons = await page.eval("document.querySelectorAll('.show-more').length")
        t0 = time.perf_counter()
        await page.eval("document.querySelector('.show-more').click(); document.body.offsetHeight")
        more = time.perf_counter() - t0
        parts = await page.eval("document.querySelectorAll('.folded-part').length")
        label = await page.eval("document.querySelector('.show-more').textContent")
        pwned = await page.eval("window.__pwned === 1")
        return height, layout, buttons, more, parts, label, pwned, page.errors()

    for path in (report, annotate):
        t0 = time.perf_counter()
        height, layout, buttons, more, parts, label, pwned, errors = asyncio.run(
            _open(chromium, path.resolve().as_uri(), check))
        opened = time.perf_counter() - t0
        assert errors == [] and not pwned
        units = len(text.encode("utf-16-le")) // 2  # JavaScript counts UTF-16 code units
        left = f"({units - 30_000} of {units} not shown)"
        assert buttons == 1 and parts == 2 and left in label, (buttons, parts, label)
        assert layout < 1.0 and more < 1.0, (path.name, layout, more)
        assert opened < 5.0, (path.name, opened)
        print(f"\n{path.name}: opened in {opened:.2f} s, layout {layout * 1000:.0f} ms, "
              f"show more {more * 1000:.0f} ms, height {height}")


try:  # the Chromium fixture of the report's browser test
    from tests.support.browser import chromium  # noqa: F401,E402
except Exception:  # pragma: no cover
    pass
