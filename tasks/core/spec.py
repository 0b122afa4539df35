"""The spec's models: a benchmark (``BenchmarkSpec``), its conditions (``ConditionSpec``) and
its views (``ViewsSpec``). Validated strictly; a component
reference is a name or ``{name: ..., args: {...}}``. Reading a spec file, finding its
components and checking their arguments is tasks/bench.py's ``load_spec``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr,
                      model_validator)

from tasks.core import registry
from tasks.roles import ROLE_TABLE, UNIVERSAL_ROLES
from tasks.core.stages import PHASES, optional_roles

# A spec that lists no stages plays episodes (tasks/stages/). ``engine:`` is the older way of
# choosing the stages, still read (tasks/bench.py ``load_spec``): ``episodes`` is this list,
# a built-in benchmark's name that benchmark's stages.
DEFAULT_STAGES = ["episodes", "verdicts", "report"]


class SpecError(Exception):
    """A spec that cannot be used (names the file and the field)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _split_ref(value, field: str):
    """A component reference: ``name`` or ``{name: ..., args: {...}}`` -> (name, args)."""
    if isinstance(value, dict):
        extra = sorted(set(value) - {"name", "args"})
        if extra or "name" not in value:
            raise ValueError(f"{field}: a component is a name or {{name: ..., args: {{...}}}}"
                             + (f" (unknown key {extra[0]!r})" if extra else " (no name)"))
        args = value.get("args") or {}
        if not isinstance(args, dict):
            raise ValueError(f"{field}.args: a mapping of argument names to values")
        return value["name"], args
    return value, {}


def _split_refs(values, field: str) -> tuple[list, dict]:
    names, args = [], {}
    for i, v in enumerate(values if isinstance(values, list) else [values]):
        name, a = _split_ref(v, f"{field}[{i}]")
        names.append(name)
        if a:
            args[name] = a
    return names, args


class ConditionSpec(_Strict):
    """A named way of presenting an item: which of the item's prompts opens the episode,
    which user policy answers the target, and how many target turns it may take."""

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")
    prompt: str | None = None  # the key of item.prompts that opens the episode
    user: str = "single_turn"  # a registered user policy (tasks/users/<name>.py built in)
    user_args: dict = Field(default_factory=dict)  # its arguments (`user: {name, args}`)
    max_turns: int = Field(1, ge=1, le=50)  # target turns at most (the turn cap)
    # The condition's script, for a user policy that plays one (the scripted user's move
    # sequences: its own model, tasks/users/scripted.py, checks it when the spec loads).
    script: dict | None = None
    description: str = ""

    @model_validator(mode="before")
    @classmethod
    def _user_ref(cls, data):
        if isinstance(data, dict) and isinstance(data.get("user"), dict):
            data = dict(data)
            data["user"], data["user_args"] = _split_ref(data["user"], "user")
        return data


class MigrateSpec(_Strict):
    """SQL beside the spec that brings a warehouse written by an older version to today's
    storage, run once by Warehouse.init() while ``when_table`` is still a table there."""

    file: str
    when_table: str = Field(pattern=r"^[a-z][a-z0-9_]*$")


class ViewsSpec(_Strict):
    """A benchmark's own metric views: a SQL file beside the spec whose ``{{benchmark}}`` and
    ``{{prefix}}`` are the benchmark's name and its views' name prefix; ``migrate``: how an
    older home's rows reach the tables the views now read."""

    file: str = "views.sql"
    prefix: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    # One migration, or several run in order (each while its own when_table is a table).
    migrate: MigrateSpec | list[MigrateSpec] | None = None

    @property
    def migrations(self) -> list[MigrateSpec]:
        return [] if self.migrate is None else (
            self.migrate if isinstance(self.migrate, list) else [self.migrate])


class BenchmarkSpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    title: str
    description: str = ""
    # The built-in benchmark a config that names none runs (exactly one built-in spec says so).
    default: bool = False
    # Registered stages in pipeline order (tasks/stages/): prepare, play (exactly one), judge,
    # report. Unset: the episode engine's (episodes, verdicts, report).
    stages: list[str] = Field(default_factory=lambda: list(DEFAULT_STAGES), min_length=1)
    # Modules of the benchmark's own components: .py files beside the spec, or module names.
    components: list[str] = Field(default_factory=list)
    loader: str | None = None  # a registered dataset loader (episode engine)
    sources: list[str] = Field(default_factory=lambda: ["sample"])  # what dataset.source may be
    conditions: list[ConditionSpec] = Field(min_length=1)
    # Who sits in the target's seat: "llm" (each configured target model), a wrapper around
    # each target model, or a deterministic policy (a seat of its own, no model).
    targets: list[str] = Field(default_factory=lambda: ["llm"], min_length=1)
    # Stop rules checked after every target turn, in order, before the turn cap and the user
    # policy: the first that names a reason ends the episode with it.
    stops: list[str] = Field(default_factory=list)
    judges: list[str] = Field(default_factory=list)  # registered judges
    report: list[str] = Field(default_factory=list)  # registered report sections
    views: ViewsSpec | None = None
    # A registered sample-key recipe (tasks/core/keys.py): ``{by: <recipe>, <its args>...}``
    # or ``{name: ..., args: {...}}``; unset: sampled calls keyed by transcript.
    sample_keys: str | None = None
    # Older names of its stages that `--stages` still accepts (old name -> stage, or the
    # stages it selected when one stage became several: a name that is still a stage may
    # then map to itself and the stages split off it).
    renamed_stages: dict[str, str | list[str]] = Field(default_factory=dict)
    # How the verdicts stage names its sets and keys a sampled judge's calls
    # (tasks/engine/verdicts.py): the engine's recipe, or a registered one a benchmark's older
    # homes need (CarryOnBench's judgment_sets).
    verdict_keys: str = "verdict_sets"
    # Arguments of the components named above, by name (`{name: ..., args: {...}}` entries).
    args: dict[str, dict] = Field(default_factory=dict)
    source_path: str | None = Field(None, exclude=True)
    _built: dict = PrivateAttr(default_factory=dict)  # components built for this spec

    @model_validator(mode="before")
    @classmethod
    def _refs(cls, data):
        # `loader`, `targets`, `judges`, `report`, `stops` and `stages` entries may carry
        # arguments; they are kept by kind and name in `args` ("judge:toy": {...}) so every
        # other reader sees names.
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "engine" in data:  # the older key; load_spec reads a built-in benchmark's name
            engine = data.pop("engine")
            if engine != "episodes":
                raise ValueError(f"engine {engine!r}: choose episodes or a built-in benchmark "
                                 "(or list `stages:`)")
            if "stages" in data:
                raise ValueError("engine: give `stages:` or `engine:`, not both")
            data["stages"] = list(DEFAULT_STAGES)
        args: dict = {}
        for field, kind in (("loader", "loader"), ("targets", "target"), ("judges", "judge"),
                            ("report", "section"), ("stops", "stop"), ("stages", "stage")):
            if field not in data or data[field] is None:
                continue
            names, a = _split_refs(data[field], field)
            data[field] = names[0] if field == "loader" else names
            args.update({f"{kind}:{n}": v for n, v in a.items()})
        keys = data.get("sample_keys")
        if isinstance(keys, dict) and "by" in keys:  # {by: recipe, its args...}
            rest = {k: v for k, v in keys.items() if k != "by"}
            keys = {"name": keys["by"], "args": rest} if rest else keys["by"]
        if keys is not None:
            name, a = _split_ref(keys, "sample_keys")
            data["sample_keys"] = name
            if a:
                args[f"sample_keys:{name}"] = a
        if args:
            data["args"] = {**args, **(data.get("args") or {})}
        return data

    @model_validator(mode="after")
    def _names(self):
        names = [c.name for c in self.conditions]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"conditions: duplicate name(s) {dup}")
        return self

    def stage_objects(self) -> list:
        """The spec's stages, built (tasks/stages/)."""
        return [self.component("stage", n) for n in self.stages]

    def check_stages(self) -> None:
        """The stages in phase order, exactly one play stage, and what each needs of the spec
        (ValueError naming the field; tasks/bench.py adds the file)."""
        dup = sorted({n for n in self.stages if self.stages.count(n) > 1})
        if dup:
            raise ValueError(f"stages: {dup[0]} is listed twice")
        objs = self.stage_objects()
        phases = [PHASES.index(o.phase) for o in objs]
        if phases != sorted(phases):
            raise ValueError(f"stages: {self.stages} are not in pipeline order ("
                             f"{' -> '.join(PHASES)})")
        plays = [o.name for o in objs if o.phase == "play"]
        if len(plays) != 1:
            raise ValueError(f"stages: a benchmark has exactly one play stage (got {plays or 'none'})")
        for i, o in enumerate(objs):
            missing = [t for t in o.reads if not any(t in p.outputs for p in objs[:i])]
            if missing:
                writers = sorted(n for (k, n) in registry.registered("stage")
                                 if missing[0] in registry.build("stage", n).outputs)
                raise ValueError(f"stages: {o.name} reads {missing[0]}, which no stage before it "
                                 f"writes" + (f" (written by {', '.join(writers)})" if writers else ""))
        if self.judges and not any(o.runs_judges for o in objs):
            raise ValueError(f"judges: {self.judges} are named, but none of the stages "
                             f"{self.stages} runs judges (the engine's is verdicts)")
        for o in objs:
            o.check(self)
        for old, new in self.renamed_stages.items():
            news = [new] if isinstance(new, str) else list(new)
            bad = [n for n in news if n not in self.stages]
            if bad or not news:
                raise ValueError(f"renamed_stages: {old}: {bad[0] if bad else news!r} is not one "
                                 f"of the stages {self.stages}")
            if old in self.stages and old not in news:
                raise ValueError(f"renamed_stages: {old} is a stage's name still")
        # A report section that reads what only some specs give (CarryOnBench's paper layout:
        # its three conditions, a Ben-Util and a safety set) checks the spec too.
        for name in self.report:
            check = registry.lookup("section", name).meta.get("check")
            if check is not None:
                check(self)
        if self.sample_keys is not None:
            self.component("sample_keys", self.sample_keys).check(self)
        if self.verdict_keys != "verdict_sets":
            self.component("verdict_keys", self.verdict_keys)

    def play_stage(self):
        """The stage that plays the episodes."""
        return next(o for o in self.stage_objects() if o.phase == "play")

    def work_stage(self):
        """The stage that defines the run's work (``select``, ``rows``, ``plan``,
        ``listing``): a prepare stage that defines it (its work shapes every stage after it:
        CarryOnBench's queries), else the play stage."""
        return next((o for o in self.stage_objects() if o.phase == "prepare" and o.defines_work),
                    self.play_stage())

    def stage(self, name: str):
        return self.component("stage", name)

    def condition(self, name: str) -> ConditionSpec:
        for c in self.conditions:
            if c.name == name:
                return c
        raise SpecError(f"{self.source_path or self.name}: no condition {name!r}")

    @property
    def prompts_dir(self) -> Path | None:
        """The prompts/ folder beside the spec: while this benchmark runs or plans, its
        templates are found before the shared ones (prompts.benchmark_prompts)."""
        return Path(self.source_path).parent / "prompts" if self.source_path else None

    @property
    def condition_names(self) -> list[str]:
        return [c.name for c in self.conditions]

    @property
    def max_turns(self) -> int:
        return max(c.max_turns for c in self.conditions)

    # ----- components (built once per loaded spec) ------------------------------------------
    def component(self, kind: str, name: str):
        """The component ``name`` of ``kind`` built with this spec's arguments for it."""
        key = (kind, name)
        if key not in self._built:
            args = self.args.get(f"{kind}:{name}")
            self._built[key] = registry.build(kind, name, args)
        return self._built[key]

    def user(self, condition: ConditionSpec):
        """The user policy of a condition, built with the condition's arguments."""
        key = ("user", condition.name)
        if key not in self._built:
            self._built[key] = registry.build("user", condition.user, condition.user_args)
        return self._built[key]

    def judge_objects(self) -> list[tuple[str, object]]:
        return [(name, self.component("judge", name)) for name in self.judges]

    def target_policies(self) -> list[tuple[str, object]]:
        return [(name, self.component("target", name)) for name in self.targets]

    def component_roles(self) -> tuple[list[str], set[str]]:
        """(roles, optional roles) the spec's components and stages declare, in spec order."""
        found: list[tuple[str, str]] = []
        if self.loader:
            found.append(("loader", self.loader))
        found += [("target", n) for n in self.targets] + [("stop", n) for n in self.stops]
        found += [("user", c.user) for c in self.conditions]
        found += [("judge", n) for n in self.judges] + [("section", n) for n in self.report]
        roles, optional = [], set()
        for kind, name in found:
            comp = registry.lookup(kind, name)
            roles += [r for r in comp.roles if r not in roles]
            optional |= optional_roles(comp)
        for s in self.stages:
            r, o = self.stage_roles(s)
            roles += [x for x in r if x not in roles]
            optional |= o
        return roles, optional

    def config_roles(self) -> list[str]:
        """The roles a config of this benchmark may set: its components' and stages' roles and
        the universal ones, in pipeline order: the prepare stages' own roles (in stage order),
        then the role table's, then the others."""
        roles, _ = self.component_roles()
        roles = list(dict.fromkeys(roles + list(UNIVERSAL_ROLES)))
        first = [r for o in self.stage_objects() if o.phase == "prepare"
                 for r in self.stage_roles(o.name)[0]]
        order = {r: i for i, r in enumerate(dict.fromkeys(first + [r.name for r in ROLE_TABLE]))}
        return sorted(roles, key=lambda r: order.get(r, len(order)))

    def needs_target_models(self) -> bool:
        """Whether any target policy sits a configured target model in the seat."""
        return any(p.takes_model for _, p in self.target_policies())

    def stage_roles(self, stage: str) -> tuple[list[str], set[str]]:
        """(roles, optional roles) a stage of this spec calls (for pre-flight and the plan),
        as the stage declares them (tasks/stages/)."""
        return self.stage(stage).roles(self)
