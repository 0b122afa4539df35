"""The move checker: a judge of the user simulator (beyond the paper).

The user simulator writes each follow-up turn from a move's instructions. Nothing forces it to
follow them: a pushback may slip in a justification, a backchannel may ask a question. The
optional ``move_checker`` role reads every simulated user turn and answers two questions:
does the message realise its move as Table 1 defines it, and does it reveal or hint at a
purpose or background? A turn passes when it realises its move and, for every move that is
not a benign clarification (pushback, rephrasing, delaying, backchannel), reveals nothing.

The scripted user (tasks/users/scripted.py) calls ``check_turn`` and resamples a failing turn
(a new sample key) up to ``move_check.max_resamples`` times; with ``move_check.exclude_failing``
an episode whose kept turn still fails gets the status ``move_check_failed``. Verdicts are data: each attempt is a ``move_checks`` row; a
checker call that fails leaves the turn unchecked (``passed`` NULL), never failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

import prompts
from tasks.core.users import CHECKER_ROLE
from tasks.untrusted import cap_transcript, cap_turn
from tasks.users.scripts import get_move

TEMPLATE = "users/move_check.j2"


class MoveVerdict(BaseModel):
    """The checker's answer; the reasoning comes first so the verdicts follow from it."""

    reasoning: str = Field(min_length=1)
    realises_move: bool
    reveals_purpose: bool


def passes(move: str, realises_move: bool, reveals_purpose: bool) -> bool:
    """The pass rule: the move is realised, and a move that does not know the intent reveals
    no purpose (benign-clarification moves are meant to reveal it)."""
    return bool(realises_move) and (get_move(move).knows_intent or not reveals_purpose)


def render(move: str, intent: str, history: list[dict], message: str) -> str:
    m = get_move(move)
    return prompts.render(TEMPLATE, move_label=m.name.replace("_", " ").upper(),
                          definition=m.definition, knows_intent=m.knows_intent, intent=intent,
                          history=cap_transcript(history), message=cap_turn(message))


@dataclass
class Check:
    """One checker verdict (``passed`` None = the checker call failed; see ``error``)."""

    passed: bool | None
    realises_move: bool | None = None
    reveals_purpose: bool | None = None
    reasoning: str | None = None
    error: str | None = None
    call_hash: str | None = None


async def check_turn(gateway, spec, move: str, intent: str, history: list[dict], message: str,
                     sample_key: str) -> Check:
    """Judge one simulated user turn. ``sample_key`` matters only for a sampled checker."""
    prompt = render(move, intent, history, message)
    r = await gateway.chat(spec, CHECKER_ROLE, [{"role": "user", "content": prompt}],
                           schema=MoveVerdict, sample_key=sample_key)
    if not r.ok:
        return Check(None, error=f"{r.error_kind}: {r.error}", call_hash=r.call_hash)
    v: MoveVerdict = r.parsed
    return Check(passes(move, v.realises_move, v.reveals_purpose), v.realises_move,
                 v.reveals_purpose, v.reasoning, call_hash=r.call_hash)
