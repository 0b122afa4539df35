"""Conversation intent graphs (RegretBench style, Ta et al., arXiv 2607.21143) and the pure
logic the regret benchmark's components share: the simulated user's reply values, the belief
over intents the replies imply, answer correctness by aliases, and the reference planner with
its expected reward R_ref. No I/O, no model: every function here is deterministic.

A graph is a prompt and its finite intents; each intent is a set of slots ``{facet: value}``
and answer aliases. An item of the benchmark is (graph, hidden intent, user behaviour) plus
its rules (reward weights U, c, lambda; the turn cap; the planner's search depth), which the
loader puts in ``item.hidden`` so the planner, the judge and the views read one setting.

The user's reply to a question about facet f (hidden intent h, behaviour b) is a tuple of
values it states, or None (a non-answer):

- h has no value for f, or the question maps to UNSUPPORTED: None;
- cooperative: (v,) with v = h's value;
- vague: at the behaviour's rate, a partial answer: v and one other value of f ("v or maybe
  w"), in a drawn order; otherwise (v,);
- contradictory: at the behaviour's rate, a conflicting value (w,), w another value of f;
  otherwise (v,).

Draws are hashes of (graph, hidden intent, facet, behaviour): the same question gets the same
reply, and a rerun gets the same episode. The *consistent set* is the intents whose value for
every facet asked lies among the values the user stated (an intent without a value for that
facet stays consistent; a non-answer rules nothing out). The belief is uniform over it; when
contradictions empty it, over the intents that agree with the most replies.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import lru_cache

from tasks.judges.reference import normalize

BEHAVIOURS = ("cooperative", "vague", "contradictory")
UNSUPPORTED = "UNSUPPORTED"
MAX_INTENTS = 50  # the views keep a consistent set as a bit mask in a DOUBLE (53 exact bits)
EPS = 1e-9


@dataclass(frozen=True)
class Intent:
    slots: tuple[tuple[str, str], ...]  # (facet, value), in the file's order
    aliases: tuple[str, ...]

    def value(self, facet: str) -> str | None:
        return dict(self.slots).get(facet)


@dataclass(frozen=True)
class Graph:
    cig_id: str
    prompt: str
    intents: tuple[Intent, ...]

    @property
    def facets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f for i in self.intents for f, _ in i.slots))

    def values(self, facet: str) -> tuple[str, ...]:
        return tuple(dict.fromkeys(v for i in self.intents if (v := i.value(facet)) is not None))

    @classmethod
    def from_hidden(cls, hidden: dict) -> "Graph":
        return cls(hidden["cig_id"], hidden.get("prompt", ""),
                   tuple(Intent(tuple(i["slots"].items()), tuple(i["aliases"]))
                         for i in hidden["intents"]))


@dataclass(frozen=True)
class Rules:
    """The reward R = U*correct - c*turns - lambda*ineffective, the turn cap (target turns)
    and the planner's search depth (questions it looks ahead)."""

    utility: float = 1.0
    turn_cost: float = 0.1
    ineffective_cost: float = 0.1
    max_turns: int = 5
    depth: int = 4
    behaviour: str = "cooperative"
    rate: float = 0.0  # the vague or contradictory user's rate (0 for cooperative)

    @classmethod
    def from_hidden(cls, hidden: dict) -> "Rules":
        return cls(**hidden["rules"])


# ----- the simulated user -----------------------------------------------------------------------

def draw(*parts) -> int:
    return int(hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:12], 16)


def reply_values(g: Graph, hidden: int, facet: str, rules: Rules) -> tuple[str, ...] | None:
    """The values the user states when asked about ``facet`` (None: a non-answer)."""
    if facet == UNSUPPORTED:
        return None
    true = g.intents[hidden].value(facet)
    if true is None:
        return None
    others = [v for v in g.values(facet) if v != true]
    key = (g.cig_id, hidden, facet, rules.behaviour)
    if rules.behaviour == "cooperative" or not others or draw(*key, "u") / 16 ** 12 >= rules.rate:
        return (true,)
    other = others[draw(*key, "other") % len(others)]
    if rules.behaviour == "contradictory":
        return (other,)
    return (true, other) if draw(*key, "order") % 2 == 0 else (other, true)


def admitted(g: Graph, facet: str, stated: tuple[str, ...] | None) -> frozenset[int]:
    """The intents a reply leaves possible."""
    return frozenset(i for i, it in enumerate(g.intents)
                     if stated is None or it.value(facet) is None or it.value(facet) in stated)


def mask(ids) -> int:
    return sum(1 << i for i in ids)


def consistent(g: Graph, observations) -> frozenset[int]:
    """The intents consistent with every (facet, stated values) observation."""
    out = frozenset(range(len(g.intents)))
    for facet, stated in observations:
        out &= admitted(g, facet, stated)
    return out


def belief(g: Graph, observations) -> dict[int, float]:
    """Uniform over the consistent set; when replies contradicted each other, uniform over
    the intents that agree with the most of them."""
    c = consistent(g, observations)
    if not c:
        agree = [sum(i in admitted(g, f, s) for f, s in observations) for i in range(len(g.intents))]
        c = frozenset(i for i, n in enumerate(agree) if n == max(agree))
    return {i: 1 / len(c) for i in sorted(c)}


def _tokens_in(needle: str, hay: str) -> bool:
    return bool(needle) and f" {needle} " in f" {hay} "


def parse_reply(g: Graph, facet: str, text: str) -> tuple[str, ...] | None:
    """The facet's values a reply names (whole tokens, normalised); a value inside another
    named value does not count. None when it names none (a non-answer)."""
    t = normalize(text or "")
    found = [v for v in g.values(facet) if _tokens_in(normalize(v), t)]
    found = [v for v in found if not any(w != v and _tokens_in(normalize(v), normalize(w))
                                         for w in found)]
    return tuple(found) or None


# ----- answers ----------------------------------------------------------------------------------

def alias_correct(g: Graph, hidden: int, response: str) -> tuple[float, str]:
    """(1, "match") when the response names an alias of the hidden intent (normalised, whole
    tokens) and no answer of a competing intent outside it; (0, "competing") when it names
    one (a wrong pick, or a list of every candidate, which is not an answer); else
    (0, "no_match"): it names no intent's answer (only then may an equivalence judge decide)."""
    own = {normalize(a) for a in g.intents[hidden].aliases} - {""}
    competing = {normalize(a) for i, it in enumerate(g.intents) if i != hidden
                 for a in it.aliases} - own - {""}
    # Longest aliases first, each occurrence taken once: "Paris, Texas" is one answer, not
    # "Paris" plus "Texas".
    rest, named = f" {normalize(response or '')} ", set()
    for a in sorted(own | competing, key=lambda x: (-len(x), x)):
        if f" {a} " in rest:
            named.add(a)
            rest = rest.replace(f" {a} ", "  ")
    if named & competing:
        return 0.0, "competing"
    return (1.0, "match") if named & own else (0.0, "no_match")


def answer_text(g: Graph, j: int) -> str:
    return g.intents[j].aliases[0]


def best_answer(g: Graph, pool: frozenset[int]) -> tuple[int, float]:
    """(intent to answer, P(correct)) under a uniform belief over ``pool``: the first intent
    whose answer is right for most of the pool."""
    best, p_best = min(pool), -1.0
    for j in sorted(pool):
        p = sum(alias_correct(g, h, answer_text(g, j))[0] for h in pool) / len(pool)
        if p > p_best + EPS:
            best, p_best = j, p
    return best, p_best


# ----- the reference planner --------------------------------------------------------------------

def info_gain(g: Graph, pool: frozenset[int], facet: str) -> float:
    """Expected information gain (bits) of asking ``facet``, uniform belief, truthful user."""
    after = [len(pool & admitted(g, facet, reply_values(g, h, facet, Rules()))) for h in pool]
    return math.log2(len(pool)) - sum(math.log2(n) for n in after) / len(pool)


@lru_cache(maxsize=65536)
def _value(g: Graph, pool: frozenset[int], asked: frozenset[str], left: int, r: Rules):
    """(expected reward from this turn on, action): answer now, or ask the facet whose
    expected outcome (a truthful user; each turn costs c, an ineffective question lambda more)
    is best; ``left`` questions may still be asked. A facet asked already is not asked again
    (the user would give the same reply). Ties: answer; then the greater information gain;
    then facet order."""
    _, p = best_answer(g, pool)
    best = (-r.turn_cost + r.utility * p, ("answer",))
    if left <= 0 or len(pool) <= 1:
        return best
    truthful = Rules()
    for facet in g.facets:
        if facet in asked:
            continue
        total = 0.0
        for h in pool:
            nxt = pool & admitted(g, facet, reply_values(g, h, facet, truthful))
            wasted = nxt == pool
            total += -r.ineffective_cost * wasted + _value(g, nxt, asked | {facet}, left - 1, r)[0]
        q = -r.turn_cost + total / len(pool)
        if q > best[0] + EPS or (best[1][0] == "ask" and q > best[0] - EPS and
                                 info_gain(g, pool, facet) > info_gain(g, pool, best[1][1]) + EPS):
            best = (q, ("ask", facet))
    return best


def decide(g: Graph, observations, turn: int, r: Rules) -> tuple:
    """The planner's action at target turn ``turn`` (1-based) after ``observations``:
    ("ask", facet) or ("answer", intent). It answers once one intent (or none) is consistent,
    at the turn cap, or when no question is worth its cost."""
    pool = consistent(g, observations)
    if not pool:
        return ("answer", best_answer(g, frozenset(belief(g, observations)))[0])
    left = min(r.depth, r.max_turns - turn)
    asked = frozenset(f for f, _ in observations)
    action = _value(g, pool, asked, left, r)[1]
    return action if action[0] == "ask" else ("answer", best_answer(g, pool)[0])


def question_text(g: Graph, facet: str, pool) -> str:
    values = [v for v in g.values(facet) if any(g.intents[i].value(facet) == v for i in pool)]
    listed = ", ".join(values[:-1]) + f" or {values[-1]}" if len(values) > 1 else "".join(values)
    return f"Which {facet.replace('_', ' ')} do you mean: {listed}?"


@dataclass(frozen=True)
class Outcome:
    steps: tuple  # ("ask", facet, stated) ... ("answer", intent)
    correct: float
    turns: int
    ineffective: int
    reward: float


def simulate(g: Graph, hidden: int, r: Rules) -> Outcome:
    """The planner's episode against the simulated user (its questions mapped to the facet
    it asks), scored as the views score every episode."""
    obs, steps, wasted, turn = [], [], 0, 1
    while True:
        action = decide(g, obs, turn, r)
        if action[0] == "answer":
            correct, _ = alias_correct(g, hidden, answer_text(g, action[1]))
            steps.append(action)
            break
        facet = action[1]
        stated = reply_values(g, hidden, facet, r)
        before = consistent(g, obs)
        repeat = any(f == facet for f, _ in obs)
        obs.append((facet, stated))
        wasted += repeat or consistent(g, obs) == before
        steps.append(("ask", facet, stated))
        turn += 1
    reward = r.utility * correct - r.turn_cost * turn - r.ineffective_cost * wasted
    return Outcome(tuple(steps), correct, turn, wasted, reward)


def r_ref(g: Graph, r: Rules) -> float:
    """The planner's expected reward on the graph under the rules' behaviour: the mean over
    the hidden intents (a uniform prior) of its simulated episode's reward."""
    return sum(simulate(g, h, r).reward for h in range(len(g.intents))) / len(g.intents)
