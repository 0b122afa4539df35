"""CarryOnBench's three conditions as its spec names them (BC, NC and the oracle): what its
stages, views and report call each. Only CarryOnBench's own modules read this; the engine
knows conditions only as the spec lists them."""

from __future__ import annotations

from dataclasses import dataclass

from tasks.bench import load_spec
from tasks.core.spec import BenchmarkSpec, ConditionSpec
from tasks.users.scripted import script_of

BENCHMARK = "carryon"  # the built-in spec these names default to


@dataclass(frozen=True)
class CarryOnConditions:
    """CarryOnBench's conditions as its spec names them: the scripts with benign
    clarification (group BC), those without (NC), and the oracle (the ``oracle`` prompt, one
    turn). Scripts of both groups share prefixes, so both use the ``scripted`` user with the
    same intent key; the stored condition of a conversation is the spec's name."""

    bc: str
    nc: str
    oracle: str
    intent: str = "intent"

    def of_group(self, group: str) -> str:
        return {"BC": self.bc, "NC": self.nc}[group]

    @classmethod
    def of(cls, conditions: list[ConditionSpec]) -> "CarryOnConditions":
        by_group, oracle, other = {}, [], []
        scripts = {}
        for c in conditions:
            if c.script is not None and c.user == "scripted" and c.prompt in (None, "query"):
                scripts[c.name] = script = script_of(c)
                set_ = sorted(script.model_fields_set & {"lengths", "per_length"})
                if set_:
                    raise ValueError(f"conditions[{c.name}].script: {', '.join(set_)} come from "
                                     "the config's scripts section in CarryOnBench; leave unset")
                by_group.setdefault(script.group, []).append(c)
            elif c.prompt == "oracle" and c.user == "single_turn" and c.max_turns == 1:
                oracle.append(c)
            else:
                other.append(c.name)
        if other or len(oracle) != 1 or sorted(by_group) != ["BC", "NC"] or any(
                len(v) != 1 for v in by_group.values()):
            raise ValueError(
                "conditions: CarryOnBench's stages run exactly one scripted condition per "
                "group BC and NC (user: scripted, script: {group: ...}) and one oracle "
                f"(prompt: oracle, user: single_turn, max_turns: 1); got {[c.name for c in conditions]}")
        bc, nc = by_group["BC"][0], by_group["NC"][0]
        if scripts[bc.name].intent != scripts[nc.name].intent:
            raise ValueError("conditions: BC and NC scripts share prefixes, so their "
                             "script.intent must be the same")
        return cls(bc.name, nc.name, oracle[0].name, scripts[bc.name].intent)


def carryon_conditions(spec: BenchmarkSpec | None = None) -> CarryOnConditions:
    """The condition names of ``spec`` (CarryOnBench's built-in spec unless one is given);
    ValueError naming the conditions when the spec's are not exactly BC, NC and the oracle."""
    return CarryOnConditions.of((spec or load_spec(BENCHMARK)).conditions)
