"""A benchmark is a spec: one YAML that names its dataset loader, its stages, its conditions,
its user policies, its target policies, its judges, its metric views and its report sections.

A config picks one with ``benchmark: <name>`` (the built-in ``tasks/benchmarks/<name>/spec.yaml``)
or ``benchmark: path/to/spec.yaml`` (unset: the config's default, tasks/config.py). Every component a spec names,
its stages included, is found in the one registry (``tasks/core/registry.py``): a built-in
one by its module, a benchmark's own ones in the modules its spec lists under ``components:``.
A component may take arguments (``{name: persona, args: {...}}``), checked when the spec
loads, and declares the model roles it calls, so a config of the benchmark may set exactly
those.

A benchmark's own metric views (``views:``, a SQL file beside its spec) take the benchmark's
name and a view prefix as parameters; the warehouse creates them after the engine's views.

A spec lists its stages: the sister benchmarks the episode engine's (episodes, verdicts,
report: tasks/stages/), CarryOnBench its own (registered beside its spec).
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import ValidationError

from tasks.core import registry
from tasks.core.judges import Judge, VerdictKeys
from tasks.core.keys import SampleKeys
from tasks.core.stages import Stage
from tasks.core.targets import TargetPolicy
from tasks.core.users import UserPolicy
from tasks.core.spec import (  # noqa: F401 (the spec's models, imported from here too)
    DEFAULT_STAGES, BenchmarkSpec, ConditionSpec, SpecError, ViewsSpec,
)
from warehouse.store import on_init, on_legacy, on_tables, on_views

# Inside the tasks package (package data), so an installed copy carries the built-in specs:
# one folder per benchmark, its spec.yaml beside its views and its own components.
BENCHMARKS_DIR = Path(__file__).resolve().parent / "benchmarks"
SPEC_FILE = "spec.yaml"


def spec_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml"):
        return p
    return BENCHMARKS_DIR / name_or_path / SPEC_FILE


def builtin_names() -> list[str]:
    return sorted(p.parent.name for p in BENCHMARKS_DIR.glob(f"*/{SPEC_FILE}"))


def default_benchmark() -> str:
    """The built-in benchmark a config that names none runs: the one whose spec says
    ``default: true`` (CarryOnBench's: configs were written for it before ``benchmark:``
    existed)."""
    found = [n for n in builtin_names() if _says_default(spec_path(n))]
    if len(found) != 1:
        raise SpecError(f"{BENCHMARKS_DIR}: exactly one built-in spec says `default: true` "
                        f"(found {found or 'none'})")
    return found[0]


def _says_default(path: Path) -> bool:
    stat = path.stat()
    return _says_default_doc(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=64)
def _says_default_doc(path: Path, mtime_ns: int, size: int) -> bool:
    # Parsed once per file version: every config a process loads asks (a tenth of a second
    # each time for the six built-in specs).
    return bool((yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("default"))


_BUILTINS_LOADED: list[bool] = []


def load_builtins() -> None:
    """Every built-in spec, loaded once: their components register what a config reads (its
    sections, the roles of the first release), whichever benchmark the config runs."""
    if not _BUILTINS_LOADED:
        for name in builtin_names():
            load_spec(name)
        _BUILTINS_LOADED.append(True)


def load_spec(name_or_path: str) -> BenchmarkSpec:
    """The spec of a benchmark, validated, its components found and their arguments checked;
    SpecError names the file and the field. A spec of its own (outside the built-in folder)
    also brings its views to every warehouse this process opens from now on."""
    spec = _load_spec(name_or_path)
    remember_views(spec)
    return spec


@lru_cache(maxsize=32)
def _load_spec(name_or_path: str) -> BenchmarkSpec:
    path = spec_path(name_or_path)
    if not path.is_file():
        raise SpecError(f"benchmark {name_or_path!r}: no spec at {path} (built in: "
                        f"{', '.join(builtin_names())})")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"{path}: cannot read the spec: {' '.join(str(e).split())[:300]}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a spec is a mapping of keys, not {type(raw).__name__}")
    if "engine" in raw:
        raw = _engine_stages(raw, path)
    try:
        registry.import_components(raw.get("components") or [], path.parent)
    except registry.ComponentError as e:
        raise SpecError(f"{path}: components: {e}") from None
    try:
        spec = BenchmarkSpec.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        msg = first["msg"].removeprefix("Value error, ")
        raise SpecError(f"{path}: {where}: {msg}") from None
    spec.source_path = str(path)
    _check_components(spec, path)
    return spec


def _engine_stages(raw: dict, path: Path) -> dict:
    """The older ``engine:`` key as ``stages:``: ``episodes`` is the episode engine's stages,
    a built-in benchmark's name is that benchmark's way of running: its stages (with the
    component modules that register them, resolved in that benchmark's folder) and, where
    the spec gives none, the loader, sample keys and verdict keys they play and judge with and
    its report, and its judges where the spec names the same ones (so a spec written with ``engine:
    carryon`` before CarryOnBench played on the episodes and verdicts stages still loads and
    means the same)."""
    raw = dict(raw)
    engine = raw.pop("engine")
    if "stages" in raw:
        raise SpecError(f"{path}: (top level): engine: give `stages:` or `engine:`, not both")
    if engine == "episodes":
        return {**raw, "stages": list(DEFAULT_STAGES)}
    if not isinstance(engine, str) or engine not in builtin_names():
        raise SpecError(f"{path}: (top level): engine {engine!r}: choose episodes or a built-in "
                        f"benchmark ({', '.join(builtin_names())}), or list `stages:`")
    other = spec_path(engine)
    theirs = yaml.safe_load(other.read_text(encoding="utf-8"))
    try:
        registry.import_components(theirs.get("components") or [], other.parent)
    except registry.ComponentError as e:
        raise SpecError(f"{other}: components: {e}") from None
    inherited = {k: theirs[k] for k in ("loader", "sample_keys", "verdict_keys", "report")
                 if k in theirs and k not in raw}
    # Judges named as that benchmark names them, without arguments: its judges as its stages
    # run them (CarryOnBench's Ben-Util and safety read the bare query and its checklist).
    if (isinstance(raw.get("judges"), list) and all(isinstance(j, str) for j in raw["judges"])
            and raw["judges"] == [j if isinstance(j, str) else j.get("name")
                                  for j in theirs.get("judges") or []]):
        inherited["judges"] = theirs["judges"]
    return {**raw, **inherited, "stages": list(theirs.get("stages") or DEFAULT_STAGES)}


# What a built component of each kind is: the ground floor's base classes (a loader, a stop
# rule and a report section are callables).
PROTOCOLS = {"user": UserPolicy, "target": TargetPolicy, "judge": Judge, "stage": Stage,
             "sample_keys": SampleKeys, "verdict_keys": VerdictKeys}


def _check_components(spec: BenchmarkSpec, path: Path) -> None:
    # Every component a spec names must resolve, with valid arguments, now: not halfway
    # through a run.
    names = [("stage", None, s, None, f"stages[{s}]") for s in spec.stages]
    names += [("user", c.name, c.user, c.user_args, f"conditions[{c.name}].user")
              for c in spec.conditions]
    if spec.loader:
        names.append(("loader", None, spec.loader, None, "loader"))
    names += [("target", None, t, None, f"targets[{t}]") for t in spec.targets]
    names += [("stop", None, t, None, f"stops[{t}]") for t in spec.stops]
    names += [("section", None, s, None, f"report[{s}]") for s in spec.report]
    names += [("judge", None, j, None, f"judges[{j}]") for j in spec.judges]
    if spec.sample_keys is not None:
        names.append(("sample_keys", None, spec.sample_keys, None, "sample_keys"))
    if spec.verdict_keys != "verdict_sets":
        names.append(("verdict_keys", None, spec.verdict_keys, None, "verdict_keys"))
    used = set()
    for kind, cond, name, cond_args, field in names:
        try:
            comp = registry.lookup(kind, name)
            comp.check_args(cond_args if kind == "user" else spec.args.get(f"{kind}:{name}"))
            built = spec.user(spec.condition(cond)) if kind == "user" else spec.component(kind, name)
        except registry.ComponentError as e:
            raise SpecError(f"{path}: {field}: {e}") from None
        base = PROTOCOLS.get(kind)
        if base is not None and not isinstance(built, base) or base is None and not callable(built):
            what = f"a {base.__module__}.{base.__name__}" if base is not None else "callable"
            raise SpecError(f"{path}: {field}: {registry.KIND_WORDS[kind]} {name} is not {what} "
                            f"(it is {type(built).__module__}.{type(built).__name__})")
        if kind == "user":  # what the policy needs of its condition (a script)
            try:
                built.check_condition(spec.condition(cond))
            except ValueError as e:
                raise SpecError(f"{path}: conditions[{cond}].{e}") from None
        used.add(f"{kind}:{name}")
    unused = sorted(set(spec.args) - used)
    if unused:
        raise SpecError(f"{path}: args: {unused[0]} names no component of this spec")
    try:
        spec.check_stages()
    except ValueError as e:
        raise SpecError(f"{path}: {e}") from None
    if spec.views is not None:
        views = path.parent / spec.views.file
        if not views.is_file():
            raise SpecError(f"{path}: views.file: no such file {views}")


def module(package: str, name: str):
    """``package.name`` imported (CarryOnBench's own stages still find a few parts by module)."""
    if not name.replace("_", "").isalnum():
        raise SpecError(f"{name!r} is not a module name")
    try:
        return importlib.import_module(f"{package}.{name}")
    except ModuleNotFoundError as e:
        if e.name and e.name.endswith(f"{package}.{name}"):
            raise SpecError(f"no module {package}.{name} "
                            f"({package.replace('.', '/')}/{name}.py)") from None
        raise


def condition_rows(spec: BenchmarkSpec) -> list[dict]:
    """The spec's conditions as rows of the warehouse table ``bench_conditions``."""
    return [{"benchmark": spec.name, "condition": c.name, "position": i, "prompt": c.prompt,
             "user_policy": c.user, "script_group": spec.user(c).group(c),
             "max_turns": c.max_turns} for i, c in enumerate(spec.conditions)]


def builtin_condition_rows() -> list[dict]:
    """Every built-in spec's condition rows (what a warehouse is seeded with)."""
    return [r for name in builtin_names() for r in condition_rows(load_spec(name))]


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


def component_tables() -> list[Path]:
    """The schema files of the tables the components bring (the checklists stage's,
    CarryOnBench's, a loaded spec's own): the built-in benchmarks' always, so every
    warehouse holds the tables their views read."""
    load_builtins()
    return [path for _, path in registry.table_sources()]


on_tables(component_tables)
on_init(seed_conditions)


def _filled(spec: BenchmarkSpec, file: str) -> str:
    text = (Path(spec.source_path).parent / file).read_text(encoding="utf-8")
    return (text.replace("{{benchmark}}", spec.name.replace("'", "''"))
            .replace("{{prefix}}", spec.views.prefix))


def views_sql(spec: BenchmarkSpec) -> str | None:
    """The spec's own metric views with its parameters filled in (None: it has none)."""
    return _filled(spec, spec.views.file) if spec.views is not None else None


def migrate_benchmarks(con) -> None:
    """Each built-in spec's ``views.migrate``, in a warehouse where its ``when_table`` is
    still a table (written before that benchmark's storage changed). Runs in
    Warehouse.init, after the condition rows are seeded (a migration may read them)."""
    tables = {n for (n,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
        "AND table_catalog = current_database()").fetchall()}
    for name in builtin_names():
        spec = load_spec(name)
        for m in spec.views.migrations if spec.views is not None else []:
            if m.when_table in tables:
                con.execute(_filled(spec, m.file))


def migrated_tables() -> list[str]:
    """The tables the built-in specs' migrations move (a merge refuses a source that has
    them: it is attached read-only, so it cannot migrate)."""
    return [m.when_table for s in map(load_spec, builtin_names()) if s.views is not None
            for m in s.views.migrations]


on_init(migrate_benchmarks)
on_legacy(migrated_tables)


_LOADED_VIEWS: dict[str, str] = {}  # specs loaded from a path in this process: their views


def benchmark_views() -> list[str]:
    """The views every Warehouse.init creates after the engine's: each built-in benchmark's,
    and those of any other spec this process loaded (a study's own spec)."""
    out = [v for name in builtin_names() if (v := views_sql(load_spec(name)))]
    return out + list(_LOADED_VIEWS.values())


def remember_views(spec: BenchmarkSpec) -> None:
    if spec.source_path and Path(spec.source_path).parent.parent != BENCHMARKS_DIR:
        sql = views_sql(spec)
        if sql:
            _LOADED_VIEWS[spec.name] = sql


on_views(benchmark_views)
