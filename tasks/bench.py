"""A benchmark is a spec: one YAML that names its dataset loader, its stages, its conditions,
its user policies, its judges and its report sections.

A config picks one with ``benchmark: <name>`` (a spec in ``tasks/specs/<name>.yaml``) or
``benchmark: path/to/spec.yaml``; unset, it is CarryOnBench (``tasks/specs/carryon.yaml``).
Everything a spec names is found by name: the loader in ``tasks/datasets/<loader>.py``, a
user policy in ``tasks/users/<policy>.py``, a judge in ``tasks/judges/<judge>.py``, a report
section in ``tasks/report/sections/<section>.py``, the metric views in
``warehouse/views_<name>.sql``. So a new judge or condition is one module plus the spec.

CarryOnBench's own stages (checklists, simulate, judge) keep their code; its spec records
what they do (conditions BC, NC and oracle, the two judges) so the report and ``carryon plan``
read the same names. The sister benchmarks run on the episode engine (stages ``episodes``
and ``verdicts``, tasks/engine/).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from warehouse.store import on_init

# Inside the tasks package (package data), so an installed copy carries the built-in specs.
SPECS_DIR = Path(__file__).resolve().parent / "specs"
DEFAULT_BENCHMARK = "carryon"
# The stages of each engine, in pipeline order.
CARRYON_STAGES = ["checklists", "simulate", "judge", "report"]
EPISODE_STAGES = ["episodes", "verdicts", "report"]


class SpecError(Exception):
    """A spec that cannot be used (names the file and the field)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ScriptSpec(_Strict):
    """Scripted flows (CarryOnBench's moves) for the ``scripted`` user: per conversation
    length, ``per_length`` move sequences of the group drawn as CarryOnBench draws them."""

    group: str = Field(pattern=r"^(BC|NC)$")  # with benign clarification, or without
    # In CarryOnBench (engine carryon) the lengths and counts are the config's `flows:`
    # section, so a carryon spec must leave these two unset.
    lengths: list[int] = Field(default_factory=lambda: [4], min_length=1)  # turns, both sides
    per_length: int = Field(1, ge=1, le=100)
    intent: str = "intent"  # the key of item.hidden that benign-clarification moves are told

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, v):
        bad = [n for n in v if n not in (4, 6, 8, 10, 12)]
        if bad:
            raise ValueError(f"length {bad[0]} is not one of 4, 6, 8, 10, 12 (turns of both sides)")
        return v


class ConditionSpec(_Strict):
    """A named way of presenting an item: which of the item's prompts opens the episode,
    which user policy answers the target, and how many target turns it may take."""

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    prompt: str | None = None  # the key of item.prompts that opens the episode
    user: str = "single_turn"  # a module of tasks/users/
    max_turns: int = Field(1, ge=1, le=50)  # target turns at most (the turn cap)
    script: ScriptSpec | None = None  # the scripted user's flows
    description: str = ""


@dataclass(frozen=True)
class CarryOnConditions:
    """CarryOnBench's conditions as its spec names them: the scripted flows with benign
    clarification (group BC), those without (NC), and the oracle (the ``oracle`` prompt, one
    turn). Flows of both groups share prefixes, so both use the ``scripted`` user with the
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
        for c in conditions:
            if c.script is not None and c.user == "scripted" and c.prompt in (None, "query"):
                set_ = sorted(c.script.model_fields_set & {"lengths", "per_length"})
                if set_:
                    raise ValueError(f"conditions[{c.name}].script: {', '.join(set_)} come from "
                                     "the config's flows section in CarryOnBench; leave unset")
                by_group.setdefault(c.script.group, []).append(c)
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
        if bc.script.intent != nc.script.intent:
            raise ValueError("conditions: BC and NC flows share prefixes, so their "
                             "script.intent must be the same")
        return cls(bc.name, nc.name, oracle[0].name, bc.script.intent)


class BenchmarkSpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    title: str
    description: str = ""
    engine: str = "episodes"  # "carryon" (its own stages) | "episodes"
    loader: str | None = None  # a module of tasks/datasets/ (episode engine)
    sources: list[str] = Field(default_factory=lambda: ["sample"])  # what dataset.source may be
    conditions: list[ConditionSpec] = Field(min_length=1)
    judges: list[str] = Field(default_factory=list)  # modules of tasks/judges/
    report: list[str] = Field(default_factory=list)  # modules of tasks/report/sections/
    source_path: str | None = Field(None, exclude=True)

    @field_validator("engine")
    @classmethod
    def _engine(cls, v):
        if v not in ("carryon", "episodes"):
            raise ValueError(f"engine {v!r}: choose carryon or episodes")
        return v

    @model_validator(mode="after")
    def _names(self):
        names = [c.name for c in self.conditions]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"conditions: duplicate name(s) {dup}")
        if self.engine == "episodes" and not self.loader:
            raise ValueError("loader: an episode benchmark needs a dataset loader")
        if self.engine == "carryon":
            self.carryon_conditions()  # raises when the conditions are not CarryOnBench's
        if self.engine == "episodes":
            bare = [c.name for c in self.conditions if not c.prompt]
            if bare:
                raise ValueError(f"conditions {bare}: an episode condition needs `prompt` (the "
                                 "item's prompt that opens the episode)")
        return self

    @property
    def stages(self) -> list[str]:
        return list(CARRYON_STAGES if self.engine == "carryon" else EPISODE_STAGES)

    def condition(self, name: str) -> ConditionSpec:
        for c in self.conditions:
            if c.name == name:
                return c
        raise SpecError(f"{self.source_path or self.name}: no condition {name!r}")

    def carryon_conditions(self) -> "CarryOnConditions":
        """The names CarryOnBench's stages, views and report give its three conditions."""
        return CarryOnConditions.of(self.conditions)

    @property
    def condition_names(self) -> list[str]:
        return [c.name for c in self.conditions]

    @property
    def max_turns(self) -> int:
        return max(c.max_turns for c in self.conditions)

    def stage_roles(self, stage: str) -> tuple[list[str], set[str]]:
        """(roles, optional roles) an episode-engine stage of this spec calls: the targets and
        its user policies' roles for ``episodes``, its judges' roles for ``verdicts``."""
        roles, optional = [], set()
        if stage == "episodes":
            roles = ["targets"]
            for c in self.conditions:
                roles += [r for r in module("tasks.users", c.user).POLICY.roles if r not in roles]
        elif stage == "verdicts":
            for name in self.judges:
                judge = module("tasks.judges", name).JUDGE
                if judge.role and judge.role not in roles:
                    roles.append(judge.role)
                    if judge.optional:
                        optional.add(judge.role)
        return roles, optional


def spec_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml"):
        return p
    return SPECS_DIR / f"{name_or_path}.yaml"


@lru_cache(maxsize=32)
def load_spec(name_or_path: str = DEFAULT_BENCHMARK) -> BenchmarkSpec:
    """The spec of a benchmark, validated; SpecError names the file and the field."""
    path = spec_path(name_or_path)
    if not path.is_file():
        known = sorted(p.stem for p in SPECS_DIR.glob("*.yaml"))
        raise SpecError(f"benchmark {name_or_path!r}: no spec at {path} (built in: "
                        f"{', '.join(known)})")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"{path}: cannot read the spec: {' '.join(str(e).split())[:300]}") from None
    try:
        spec = BenchmarkSpec.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise SpecError(f"{path}: {where}: {first['msg']}") from None
    spec.source_path = str(path)
    _check_modules(spec, path)
    return spec


def _check_modules(spec: BenchmarkSpec, path: Path) -> None:
    # Every name a spec uses must resolve now, not halfway through a run.
    names = [("tasks.users", c.user, f"conditions[{c.name}].user") for c in spec.conditions]
    if spec.loader:
        names.append(("tasks.datasets", spec.loader, "loader"))
    names += [("tasks.judges", j, "judges") for j in spec.judges]  # every engine's judges
    if spec.engine == "episodes":
        names += [("tasks.report.sections", s, "report") for s in spec.report]
    for package, name, field in names:
        try:
            module(package, name)
        except SpecError as e:
            raise SpecError(f"{path}: {field}: {e}") from None


def module(package: str, name: str):
    """``package.name`` imported (a spec's names are module names)."""
    if not name.replace("_", "").isalnum():
        raise SpecError(f"{name!r} is not a module name")
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as e:
        if e.name and e.name.endswith(f"{package}.{name}"):
            raise SpecError(f"no module {package}.{name} "
                            f"({package.replace('.', '/')}/{name}.py)") from None
        raise


def carryon_conditions(spec: BenchmarkSpec | None = None) -> CarryOnConditions:
    """CarryOnBench's condition names (of the built-in spec unless one is given)."""
    return (spec or load_spec(DEFAULT_BENCHMARK)).carryon_conditions()


def condition_rows(spec: BenchmarkSpec) -> list[dict]:
    """The spec's conditions as rows of the warehouse table ``bench_conditions``."""
    return [{"benchmark": spec.name, "condition": c.name, "position": i, "prompt": c.prompt,
             "user_policy": c.user, "script_group": c.script.group if c.script else None,
             "max_turns": c.max_turns} for i, c in enumerate(spec.conditions)]


def builtin_condition_rows() -> list[dict]:
    """Every built-in spec's condition rows (what a warehouse is seeded with)."""
    return [r for p in sorted(SPECS_DIR.glob("*.yaml")) for r in condition_rows(load_spec(p.stem))]


def seed_conditions(con) -> None:
    """The built-in specs' condition rows for each benchmark that has none yet (a run
    replaces its benchmark's rows with its own spec's), so the views of a warehouse never
    opened by a run of this version still find their conditions. Runs in Warehouse.init."""
    have = {b for (b,) in con.execute("SELECT DISTINCT benchmark FROM bench_conditions").fetchall()}
    rows = [r for r in builtin_condition_rows() if r["benchmark"] not in have]
    if rows:
        cols = list(rows[0])
        con.executemany(f"INSERT INTO bench_conditions ({', '.join(cols)}) VALUES "
                        f"({', '.join('?' * len(cols))})", [[r[c] for c in cols] for r in rows])


on_init(seed_conditions)
