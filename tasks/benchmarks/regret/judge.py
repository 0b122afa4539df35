"""The regret judge (RegretBench style): per assistant turn, the facet a clarifying question
asks about and what the simulated user's reply leaves possible; per answer, correctness by the
hidden intent's aliases; on the episode's last turn, the reference planner's reward R_ref.

Measures (rows of ``verdicts``; NULL with label ``not_applicable`` where a measure does not
apply, which the engine does not count as unscored):

- ``facet``: for a question the user replied to (the responder read it as a clarifying
  question: ``turn.act``), label = the facet (or ``UNSUPPORTED``), value 1 (a facet) or 0;
- ``admitted``: the same turns: value = the bit mask of the intents the reply leaves possible
  (bit i = intent i), label = their indices ("0,2"); the views intersect these per episode
  into the consistent set and the belief (uniform over it) turn by turn;
- ``alias_correct``: every response: 1 when it names an alias of the hidden intent and no
  competing intent's answer (tasks/benchmarks/regret/cig.py ``alias_correct``), label ``match``, ``no_match``
  or ``competing``; the views read it on the final answer;
- ``r_ref``: the last turn: the reference planner's reward on this item (its simulated
  episode against the same user), label its steps; ``r_ref_expected``: its mean over the
  graph's intents (the expected reward under a uniform prior for this behaviour).

The facet-mapper request is the responder's own (tasks/benchmarks/regret/responder.py sends it while
the episode is played), so this stage reads it from the gateway's cache: it depends only on
the graph's prompt and facets and the question. A failed mapper call leaves the turn's
measures unscored (the views leave its episode out and count it).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

import prompts
from tasks.benchmarks.regret.cig import UNSUPPORTED, Graph, Rules, admitted, alias_correct, mask, r_ref, \
    reply_values, simulate
from tasks.core.registry import judge
from tasks.judges.prompts import fence
from tasks.core.judges import Judge, Measure, Request, TurnView
from tasks.roles import Role
from tasks.untrusted import cap_turn

TEMPLATE = "regret/facet_map.j2"
CLARIFYING = "clarifying_question"
NOT_APPLICABLE = "not_applicable"
FACET_MAPPER = Role("facet_mapper", ("episodes", "verdicts"), "one", TEMPLATE, "FacetMapping",
                    (350, 60), in_report=True)


def cap(text: str | None) -> str:
    """Model-written text for a prompt: the project's per-turn cap (limits.prompt_turn_chars),
    which says what it cut and counts it."""
    return cap_turn(text or "")


class FacetMapping(BaseModel):
    reason: str = Field(description="one sentence: what the question asks, written first")
    facet: str = Field(description="a facet name exactly as listed, or UNSUPPORTED")


def facet_messages(item, question: str) -> list[dict]:
    """The mapper's request: the graph's prompt and facets (with their values) and the fenced
    question; nothing of the hidden intent, so every item of a graph shares it."""
    g = Graph.from_hidden(item.hidden)
    token, safe = fence(cap(question))
    text = prompts.render(TEMPLATE, prompt=g.prompt, question=safe, question_token=token,
                          facets=[{"name": f, "options": g.values(f)} for f in g.facets])
    return [{"role": "user", "content": text}]


def resolve_facet(g: Graph, named: str) -> str:
    """The mapper's answer as a facet of the graph (case, spaces and underscores aside);
    anything else is UNSUPPORTED."""
    key = "_".join((named or "").replace("_", " ").lower().split())
    for f in g.facets:
        if "_".join(f.replace("_", " ").lower().split()) == key:
            return f
    return UNSUPPORTED


def _na(measure: str, why: str) -> Measure:
    return Measure(measure, None, NOT_APPLICABLE, why)


class RegretJudge(Judge):
    def wants(self, turn: TurnView) -> bool:
        return turn.response is not None or turn.blocked

    def request(self, turn: TurnView) -> Request | None:
        if turn.blocked or turn.response is None or turn.act != CLARIFYING:
            return None
        return Request(facet_messages(turn.item, turn.response), FacetMapping)

    def verdicts(self, turn: TurnView, parsed: FacetMapping | None) -> list[Measure]:
        g, rules = Graph.from_hidden(turn.item.hidden), Rules.from_hidden(turn.item.hidden)
        h = turn.item.hidden["hidden_index"]
        if parsed is None:
            why = "not a question the user replied to"
            out = [_na("facet", why), _na("admitted", why)]
        else:
            facet = resolve_facet(g, parsed.facet)
            ids = sorted(admitted(g, facet, reply_values(g, h, facet, rules)))
            note = parsed.reason if facet != UNSUPPORTED or parsed.facet == UNSUPPORTED else \
                f"the mapper named {parsed.facet[:80]!r}, not a facet: {parsed.reason}"
            out = [Measure("facet", float(facet != UNSUPPORTED), facet, note),
                   Measure("admitted", float(mask(ids)), ",".join(map(str, ids)))]
        if turn.blocked:
            out.append(Measure("alias_correct", 0.0, "no_match", "blocked by the provider"))
        else:
            value, label = alias_correct(g, h, turn.response)
            out.append(Measure("alias_correct", value, label))
        if turn.is_last:
            ref = simulate(g, h, rules)
            steps = " > ".join(f"ask {s[1]}" if s[0] == "ask" else f"answer {s[1]}"
                               for s in ref.steps)
            out += [Measure("r_ref", ref.reward, steps[:200]),
                    Measure("r_ref_expected", r_ref(g, rules))]
        else:
            out += [_na("r_ref", "not the last turn"), _na("r_ref_expected", "not the last turn")]
        return out


JUDGE = RegretJudge(kind="regret", role=FACET_MAPPER.name,
                    measures=("facet", "admitted", "alias_correct", "r_ref", "r_ref_expected"),
                    templates=(TEMPLATE, "judges/_fenced.j2"), extra_version="cig-v1")
judge("regret", roles=(FACET_MAPPER,))(JUDGE)
