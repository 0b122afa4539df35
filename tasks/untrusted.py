"""A length cap on model-written text entering a prompt, one turn at a time.

A target may answer with a megabyte (a loop, a payload, a long line): without a cap that
megabyte goes whole into every judge and simulator prompt that shows the turn, each call
paying for it and many overflowing the judge's context. ``cap_turn`` keeps the first
``prompt_turn_chars`` characters of a turn (config ``limits.prompt_turn_chars``, default
100,000: about 25,000 tokens, beyond any answer of the shipped configs' ``max_tokens``, so
no prompt of an existing home changes and its cache keeps answering) and says in the prompt
what it cut, so a judge knows the response goes on.

What is stored is never cut: the warehouse keeps the whole turn. Each cut is counted
(``cuts()``; the run summary and the command's output show the count) and logged once per
turn text.

The setting is process-wide: a run sets it from its config when it opens (tasks/engine/run.py), and
prompts are built deep in the stages without the config at hand.
"""

from __future__ import annotations

import hashlib
import logging

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger("carryon.untrusted")

DEFAULT_TURN_CHARS = 100_000
MARK = "[CarryOnBench cut this turn here: {n:,} more characters not shown (limits.prompt_turn_chars = {cap:,})]"


class LimitsConfig(BaseModel):
    """``limits:`` in a config."""

    model_config = ConfigDict(extra="forbid", strict=True)
    # Characters of one model-written turn that a prompt shows (the rest is cut, and said so).
    prompt_turn_chars: int = Field(DEFAULT_TURN_CHARS, ge=1_000, le=100_000_000)


_cap = DEFAULT_TURN_CHARS
_cut: set[str] = set()  # hashes of the turn texts cut since the run opened


def configure(limits: LimitsConfig | None) -> None:
    """A run's setting (and a fresh count of cuts)."""
    global _cap
    _cap = limits.prompt_turn_chars if limits is not None else DEFAULT_TURN_CHARS
    _cut.clear()


def cuts() -> int:
    """How many distinct turn texts were cut since the run opened."""
    return len(_cut)


def cap_turn(text: str | None, cap: int | None = None) -> str | None:
    """``text`` whole when within the cap, else its first ``cap`` characters and a line that
    says how much was cut."""
    cap = cap or _cap
    if text is None or len(text) <= cap:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    if digest not in _cut:
        _cut.add(digest)
        log.warning("a model-written turn of %d characters was cut to %d in the prompts that show "
                    "it (limits.prompt_turn_chars); the warehouse keeps it whole", len(text), cap)
    return text[:cap] + "\n" + MARK.format(n=len(text) - cap, cap=cap)


def cap_transcript(turns: list[dict]) -> list[dict]:
    """A transcript (dicts with ``content``) with every turn's content capped; the dicts are
    copied only where a turn is cut, so an uncut transcript is the same list's contents."""
    out = []
    for turn in turns:
        content = turn.get("content")
        capped = cap_turn(content) if isinstance(content, str) else content
        out.append(turn if capped is content else {**turn, "content": capped})
    return out


# ----------------------------------------------------------------------------- pages
# report.html and the annotation pages lay out a turn with the browser's text engine, whose
# time grows faster than the text: one megabyte on a single line of mixed scripts takes tens
# of seconds (Chromium, measured), the first 10,000 characters a tenth of a second. So a long
# turn shows its first FOLD_CHARS characters and a button that adds STEP_CHARS more per click,
# each part a block of its own (laid out alone; a line split between two parts shows as two).
# Plain ES5, textContent only: the pages' own scripts call carryonFoldedText(cls, text).
FOLD_CHARS = 10_000
STEP_CHARS = 20_000
FOLD_CSS = (".folded-part{white-space:pre-wrap;overflow-wrap:anywhere}"
            ".show-more{display:block;margin:.4em 0;font-size:.85em}")
FOLD_JS = """
function carryonFoldedText(cls, text) {
  "use strict";
  var FOLD = %d, STEP = %d;
  var box = document.createElement("div");
  box.className = cls;
  text = String(text);
  if (text.length <= FOLD) { box.textContent = text; return box; }
  var shown = 0, more = document.createElement("button");
  more.type = "button";
  more.className = "show-more";
  function add(n) {
    var part = document.createElement("div");
    part.className = "folded-part";
    part.textContent = text.slice(shown, shown + n);
    box.insertBefore(part, more);
    shown = Math.min(text.length, shown + n);
    if (shown >= text.length) { box.removeChild(more); return; }
    more.textContent = "show " + Math.min(STEP, text.length - shown) + " more characters (" +
      (text.length - shown) + " of " + text.length + " not shown)";
  }
  box.appendChild(more);
  more.addEventListener("click", function () { add(STEP); });
  add(FOLD);
  return box;
}
""" % (FOLD_CHARS, STEP_CHARS)
