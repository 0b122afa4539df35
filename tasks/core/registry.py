"""Components in one registry: stages, user policies, target policies, judges, dataset loaders,
stop rules and report sections, each registered with a decorator under a name a spec can use.

    @user_policy("persona", args=PersonaArgs, roles=("user_simulator",))
    class Persona: ...

A registration says what the component needs and nothing more:

- ``args``: a pydantic model of the arguments a spec may pass (``{name: persona, args:
  {...}}`` where a plain name is also accepted). The spec's arguments are validated against
  it when the spec loads, strictly, so a typo or a wrong type is one line naming the spec file
  and the field; the component is built with the validated model (``Persona(args)``). A
  component without ``args`` takes none.
- ``roles``: the model roles it calls, by name (a row of ``tasks/roles.py``) or as a new
  ``Role`` (so a study can bring a judge role the project never heard of). A config may set
  exactly the roles its spec's components declare (plus the few every benchmark has), so no
  role is listed per benchmark anywhere.

Built-in components live in one module per name (``tasks/stages/<name>.py``, ``tasks/users/<name>.py``,
``tasks/judges/<name>.py``, ``tasks/datasets/<name>.py``, ``tasks/targets/<name>.py``,
``tasks/report/sections/<name>.py``): a lookup imports that module, which registers it (every
loader and section so far is a benchmark's own, beside its spec).
A spec may also list its own modules (``components:``, files beside the spec or importable
module names): they are imported when the spec loads, so a new benchmark's components need
no edit anywhere else.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from tasks.roles import BY_NAME, Role

# kind -> the package holding its built-in components (one module per name); None: the kind
# has no built-in one yet (every stop rule so far is a benchmark's own).
PACKAGES = {
    "stage": "tasks.stages",
    "user": "tasks.users",
    "target": "tasks.targets",
    "judge": "tasks.judges",
    "loader": "tasks.datasets",
    "stop": None,
    "section": "tasks.report.sections",
    # Key recipes: how play keys its sampled calls and names its episodes, how judging names
    # its sets (tasks/core/keys.py, tasks/core/judges.py); the engine's own when a spec names
    # none, so every one so far is a benchmark's (CarryOnBench's).
    "sample_keys": None,
    "verdict_keys": None,
    # Kinds of human validation (``carryon validate --kind``): Ben-Util's and safety's over
    # any benchmark's verdicts built in; a benchmark's own study beside its spec.
    "validation": "tasks.validation.kinds",
}
KIND_WORDS = {"stage": "stage", "user": "user policy", "target": "target policy", "judge": "judge",
              "loader": "dataset loader", "stop": "stop rule", "section": "report section",
              "sample_keys": "sample-key recipe", "verdict_keys": "verdict-key recipe",
              "validation": "validation kind"}


class ComponentError(Exception):
    """A component that cannot be found or built (the caller adds the spec file and field)."""


@dataclass(frozen=True)
class Component:
    kind: str
    name: str
    factory: Any  # a class (instantiated), or the component itself (a function or an object)
    args: type[BaseModel] | None
    roles: tuple[str, ...]
    module: str
    # What else the kind needs to know: a loader's ``sample`` (the path of the team's sample
    # file), a section's ``title``, a target policy's ``takes_model``, a stage's hooks
    # (tasks/core/stages.py).
    meta: dict = field(default_factory=dict)

    def check_args(self, args: dict | None) -> BaseModel | None:
        """The spec's arguments validated (strict), or ComponentError naming the argument."""
        if self.args is None:
            if args:
                raise ComponentError(f"{KIND_WORDS[self.kind]} {self.name} takes no arguments "
                                     f"(got {', '.join(sorted(args))})")
            return None
        try:
            return self.args.model_validate(args or {}, strict=True)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(["args", *(str(p) for p in first["loc"])])
            raise ComponentError(f"{where}: {first['msg'].removeprefix('Value error, ')}") from None

    def build(self, args: dict | None = None):
        """The component, built with the spec's arguments."""
        checked = self.check_args(args)
        if checked is not None:
            return self.factory(checked)
        return self.factory() if inspect.isclass(self.factory) else self.factory


_REGISTRY: dict[tuple[str, str], Component] = {}
_ROLES: dict[str, Role] = {}  # roles components brought that the role table does not hold
_ROLE_OWNERS: dict[str, str] = {}  # such a role -> the module of the component that brought it


@dataclass(frozen=True)
class Settings:
    """Fields a component brings to a section of the run's config (``@settings(section)`` on a
    pydantic model, in the component's module): tasks/config.py assembles each section from
    every component's fields, so the shared config lists no benchmark's or stage's keys."""

    section: str  # the config's key (``checklists``, ``scripts``, ``dataset``, ...)
    model: type[BaseModel]
    owner: str  # the module that brought it
    aliases: tuple[str, ...] = ()  # older names the section is read under
    stored_as: str | None = None  # the name it is stored and hashed under (an older one)
    # The section was in every config of the first release: its defaults stay in the config
    # hash even when the config leaves it out. Any other section is left out of the hash at
    # its defaults, so adding one never moves an existing config's hash (or its run ids).
    first_release: bool = False
    later: tuple[str, ...] = ()  # fields added after the first release: out of the hash at their default


_SETTINGS: list[Settings] = []


def settings(section: str, *, aliases: tuple[str, ...] = (), stored_as: str | None = None,
             first_release: bool = False, later: tuple[str, ...] = ()) -> Callable:
    """Register the decorated pydantic model's fields as part of the config's ``section``."""
    def deco(model):
        entry = Settings(section, model, model.__module__, tuple(aliases), stored_as,
                         first_release, tuple(later))
        if entry not in _SETTINGS:
            _SETTINGS.append(entry)
        return model

    return deco


def config_settings() -> list[Settings]:
    """Every section part registered so far, in registration order."""
    return list(_SETTINGS)


_TABLES: list[tuple[str, Path]] = []


def tables(models: str, schema: Path) -> None:
    """A component's own warehouse tables (the checklists stage's, a benchmark's): the module
    of their SQLModel classes and the schema file rendered from it (warehouse/schema_file.py),
    which every warehouse creates beside the shared tables (tasks/bench.py hands them over)."""
    entry = (models, Path(schema))
    if entry not in _TABLES:
        _TABLES.append(entry)


def table_sources() -> list[tuple[str, Path]]:
    """(models module, schema file) of every component's own tables registered so far."""
    return list(_TABLES)


def register(kind: str, name: str, *, args: type[BaseModel] | None = None,
             roles: tuple = (), **meta) -> Callable:
    """The decorator behind ``user_policy``, ``judge``, ...: registers what it decorates
    (a class, built with the spec's arguments, or the component itself)."""
    if kind not in PACKAGES:
        raise ValueError(f"unknown component kind {kind!r}")
    names = []
    for r in roles:
        if isinstance(r, Role):
            known = BY_NAME.get(r.name) or _ROLES.get(r.name)
            if known is not None and known != r:
                raise ValueError(f"role {r.name} is declared twice, differently")
            if r.name not in BY_NAME:
                _ROLES[r.name] = r
            names.append(r.name)
        elif r in BY_NAME or r in _ROLES:
            names.append(r)
        else:
            raise ValueError(f"{kind} {name}: role {r!r} is not in tasks/roles.py; declare it "
                             "with a Role(...)")

    def deco(obj):
        module = getattr(obj, "__module__", "")
        _REGISTRY[(kind, name)] = Component(kind, name, obj, args, tuple(names), module, meta)
        for r in roles:
            if isinstance(r, Role) and r.name not in BY_NAME:
                _ROLE_OWNERS.setdefault(r.name, module)
        return obj

    return deco


# One decorator per kind: ``@user_policy("name", args=..., roles=...)`` and so on.
stage = partial(register, "stage")
user_policy = partial(register, "user")
target_policy = partial(register, "target")
judge = partial(register, "judge")
loader = partial(register, "loader")
stop_rule = partial(register, "stop")
section = partial(register, "section")
sample_keys = partial(register, "sample_keys")
verdict_keys = partial(register, "verdict_keys")
validation_kind = partial(register, "validation")


def lookup(kind: str, name: str) -> Component:
    """The component ``name`` of ``kind``: registered already (a spec's own modules), or the
    built-in module of that name, imported now."""
    key = (kind, name)
    if key not in _REGISTRY:
        if not name.replace("_", "").isalnum():
            raise ComponentError(f"{name!r} is not a component name")
        package = PACKAGES[kind]
        try:
            if package:
                importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as e:
            if not (e.name and (e.name == package or e.name.endswith(f"{package}.{name}"))):
                raise
    if key not in _REGISTRY:
        known = sorted(n for k, n in _REGISTRY if k == kind)
        where = (f"built-in ones live in {package.replace('.', '/')}/<name>.py, " if package
                 else "")
        raise ComponentError(f"no {KIND_WORDS[kind]} named {name!r} (registered: "
                             f"{', '.join(known) or 'none'}; {where}a benchmark's own load "
                             "when the spec lists their module under components:, e.g. "
                             "tasks.benchmarks.clarify.loader)")
    return _REGISTRY[key]


def registered(kind: str) -> list[tuple[str, str]]:
    """The (kind, name) pairs registered so far of one kind."""
    return sorted(k for k in _REGISTRY if k[0] == kind)


def build(kind: str, name: str, args: dict | None = None):
    return lookup(kind, name).build(args)


def role(name: str) -> Role | None:
    """A role of the table or one a component declared."""
    return BY_NAME.get(name) or _ROLES.get(name)


def declared_roles() -> dict[str, Role]:
    """The roles components brought beyond the role table."""
    return dict(_ROLES)


def role_owner(name: str) -> str | None:
    """The module of the component that brought a role beyond the table (None: a table role)."""
    return _ROLE_OWNERS.get(name)


def known_roles() -> dict[str, Role]:
    """Every role known so far: the table's, then those components brought."""
    return {**BY_NAME, **_ROLES}


def import_components(entries: list[str], base: Path) -> None:
    """Import a spec's own component modules: a ``.py`` path (relative to the spec's folder)
    or a module name. Importing registers what they define."""
    for entry in entries:
        if entry.endswith(".py"):
            path = (base / entry).resolve()
            if not path.is_file():
                raise ComponentError(f"{entry}: no such file ({path})")
            digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
            mod_name = f"carryon_components_{path.stem}_{digest}"
            if mod_name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(mod_name, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = mod
            try:
                spec.loader.exec_module(mod)
            except Exception:
                del sys.modules[mod_name]
                raise
        else:
            try:
                importlib.import_module(entry)
            except ModuleNotFoundError as e:
                raise ComponentError(f"{entry}: no module {e.name}") from None
