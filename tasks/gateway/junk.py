"""Answers that are not answers: a weak model's echoes and fillers, caught before they count.

Schema-valid is not the same as meaningful. A small model asked for
``{"intent": "<the statement>"}`` may answer exactly that; asked for a checklist it may answer
``{"question": "..."}``; as a target it may send the user's message back. Each of these would
otherwise be cached, stored and judged as if it were content. ``junk_reason`` names what is
wrong (the gateway re-asks, then records the call as ``invalid_output``), or returns None.

The rules, deliberately narrow so that a real answer is never refused:

- empty-looking: a text with no letter or digit at all ("...", "—", "{}");
- a placeholder echoed back: a string value equal to one of the prompt's quoted example
  values (a literal holding "..." or a ``<placeholder>``, e.g. ``"<the statement>"``,
  ``"I am ..."``), or a bare ``<...>`` / ``[...]`` placeholder, whatever its length (a
  judge's ``<a few sentences: what is asked, what the response gives, what it leaves out>``
  is as much a placeholder as ``<the statement>``: one rule for every prompt);
- a copy of the prompt (free-text answers only): the answer, whitespace-normalised, equals the
  last user message or is a long verbatim slice of it (the message is at least 40 characters).
  Structured answers are exempt: a judge's evidence is a verbatim quote by design.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

_ALNUM = re.compile(r"[^\W_]", re.UNICODE)
_PLACEHOLDER = re.compile(r"^\s*(<[^<>\n]+>|\[[^\[\]\n]+\])\s*$")
_QUOTED = re.compile(r'"([^"\n]+)"')
MIN_COPY_CHARS = 40


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _prompt_text(messages: list[dict] | None, prompt: str | None) -> str:
    if prompt is not None:
        return prompt
    parts = []
    for m in messages or []:
        c = m.get("content")
        parts.append(c if isinstance(c, str) else " ".join(
            p.get("text", "") for p in c or [] if isinstance(p, dict)))
    return "\n".join(parts)


def _last_user(messages: list[dict] | None, prompt: str | None) -> str:
    if prompt is not None:
        return prompt
    for m in reversed(messages or []):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"]
    return ""


def _empty_looking(text: str) -> bool:
    return bool(text.strip()) and not _ALNUM.search(text)


def junk_reason(content: str, parsed: BaseModel | None, messages: list[dict] | None,
                prompt: str | None = None) -> str | None:
    """Why ``content`` (and its parsed object, for structured calls) is not an answer, or None."""
    if parsed is not None:
        # The prompt's own example values: quoted literals that hold "..." or a <placeholder>.
        literals = {_norm(m) for m in _QUOTED.findall(_prompt_text(messages, prompt))
                    if "..." in m or "…" in m or _PLACEHOLDER.match(m)}
        for value in _strings(parsed.model_dump(mode="json")):
            if _empty_looking(value):
                return f"a field holds no words ({value[:20]!r})"
            if _PLACEHOLDER.match(value) or _norm(value) in literals:
                return f"a placeholder echoed back ({value[:40]!r})"
        return None
    if _empty_looking(content) or not content.strip():
        return f"no words ({content.strip()[:20]!r})"
    if _PLACEHOLDER.match(content):
        return f"a placeholder echoed back ({content.strip()[:40]!r})"
    last = _norm(_last_user(messages, prompt))
    mine = _norm(content)
    if len(last) >= MIN_COPY_CHARS and (mine == last or (len(mine) >= MIN_COPY_CHARS and mine in last)):
        return "a copy of the prompt"
    return None
