"""The run configuration: one YAML file validated by pydantic.

Errors name the file and the field (``configs/x.yaml: models.targets.0.model: Field required``)
so a user can fix a typo without reading a traceback. Environment overrides:

- ``CARRYON_HOME``     replaces ``home``;
- ``CARRYON_API_BASE`` replaces the ``api_base`` of every model entry;
- ``CARRYON_API_KEY``  supplies the key of every model entry (read at call time, never stored).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from pathlib import Path
from typing import Literal, get_args

import yaml
from pydantic import (
    AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model,
    model_validator,
)

from tasks.bench import SpecError, default_benchmark, load_builtins, load_spec
from tasks.config_error import ConfigError  # a leaf: tasks/model_env.py raises it too
from tasks.core import registry
from tasks.input_files import CONFIG_MAX_BYTES, InputFileError, read_input_bytes
from tasks.untrusted import LimitsConfig
from tasks.roles import ROLE_TABLE

# Keys added after the first release: at their default they are left out of the config's
# hash, so a config written before them keeps its hash (and its run ids).
ADDED_LATER = ("benchmark", "limits")


# A config file larger than this is not a config file (and YAML parsing is not free).
MAX_CONFIG_BYTES = CONFIG_MAX_BYTES


# The model entry (as written and as resolved) and the gateway's own settings live in
# tasks/model_entry.py, on the ground floor, so the gateway takes them without importing this
# module (tests/test_import_graph.py); re-exported here, where the stages and tests import them.
from tasks.model_entry import (  # noqa: E402,F401
    INT64_MAX, UNHASHED_ENTRY_FIELDS, UNHASHED_GATEWAY_FIELDS, GatewayConfig, ModelEntry,
    ModelSpec, PriceEntry, _Strict, api_key_for,
)


class DatasetConfig(_Strict):
    # The benchmark's spec lists what it may be (its `sources:`); a loader that selects by
    # more than its file adds its own keys to this section (CarryOnBench: the categories it
    # excludes, a minimum safe rate).
    source: str = "sample"
    path: str | None = None
    limit: int | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _path_for_files(self):
        if self.source != "sample" and not self.path:
            raise ValueError(f"dataset.source {self.source!r} needs dataset.path")
        return self


class MoveCheckConfig(_Strict):
    """The move checker (``models.move_checker``; unset = no checking). Every simulated user
    turn is judged: does it realise its move, and (moves other than benign clarification)
    does it reveal or hint at a purpose? A failing turn is sampled again with a new sample
    key up to ``max_resamples`` times; a conversation with a turn that still fails is flagged
    (``conversations.move_check_failed``) and, with ``exclude_failing``, gets the status
    ``move_check_failed`` so the metric views leave it out."""

    max_resamples: int = Field(2, ge=0, le=20)
    exclude_failing: bool = False


def _role_field(r):
    # A role's config shape comes from the role table (tasks/roles.py).
    if r.shape == "list":
        return (list[ModelEntry], Field(default_factory=list))
    if r.shape == "either":
        return (ModelEntry | list[ModelEntry] | None, None)
    return (ModelEntry | None, None)


class _ModelsBase(_Strict):
    # A benchmark's components may declare roles the table does not hold: such a key is kept
    # as given here and checked against the spec's roles by _check_benchmark.
    model_config = ConfigDict(extra="allow", strict=True)
    defaults: ModelEntry = Field(default_factory=ModelEntry)


def _config_roles() -> list:
    """The roles that are fields of ``models:``: the role table's and those of the first
    release that components declare (the checklists stage's, CarryOnBench's rewriter); any
    other role a component brings is an extra key, checked against the spec's roles."""
    declared = [r for r in registry.declared_roles().values() if r.first_release]
    return [*declared, *ROLE_TABLE]


class Config(_Strict):
    """The run's config. Its sections beyond the shared keys below are assembled from what the
    components register (``registry.settings``: the checklists stage's ``checklists``, the
    scripted user's ``scripts``, the judges' ``judging``, CarryOnBench's ``dataset`` keys),
    the built-in benchmarks' always: ``Config.model_validate`` (and ``load_config``) validate
    with that assembled model, ``config_model()``."""

    model_config = ConfigDict(serialize_by_alias=True)  # merged with _Strict's: "flows" stored
    # The benchmark this config runs: tasks/benchmarks/<name>/spec.yaml by name, or a path to
    # a spec YAML; unset, the built-in spec that says `default: true` (CarryOnBench's).
    benchmark: str = Field(default_factory=lambda: default_benchmark())
    home: str = ".carryon"
    # Where the response cache lives (default <home>/cache; env CARRYON_CACHE_DIR overrides):
    # workers on one machine can share one; see docs/deploy.md for several machines.
    cache_dir: str | None = None
    seed: int = Field(0, ge=0, le=INT64_MAX)
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    # The play loop's move check (models.move_checker; tasks/users/move_checker.py).
    move_check: MoveCheckConfig = Field(default_factory=MoveCheckConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    # How much of one model-written turn a prompt shows (tasks/untrusted.py).
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    models: _ModelsBase = Field(default_factory=_ModelsBase)
    # The most this home may have spent on model calls, all runs together (USD): a run stops
    # before a request or batch that could pass it (tasks/gateway/budget.py, docs/costs.md).
    # `carryon run --budget-usd` overrides it. How much is spent, not what is answered: in no
    # config hash, cache key, run id or stage memo.
    budget_usd: float | None = Field(None, gt=0)
    # Filled by load_config, never by the user.
    source_path: str | None = Field(None, exclude=True)

    @classmethod
    def model_validate(cls, obj, **kw):
        """Validated with the sections the components bring (``config_model()``)."""
        model = config_model() if cls is Config else cls
        return BaseModel.model_validate.__func__(model, obj, **kw)

    @property
    def spec(self):
        """The benchmark's spec (tasks/bench.py); a relative spec path is read beside the
        config file when there is one there, else from the working folder."""
        name = self.benchmark
        path = Path(name)
        if path.suffix in (".yaml", ".yml") and not path.is_absolute() and self.source_path:
            beside = Path(self.source_path).parent / path
            name = str(beside.resolve()) if beside.is_file() else str(path.resolve())
        try:
            return load_spec(name)
        except SpecError as e:
            # The spec's own message names the benchmark (or the spec file and its field).
            raise ConfigError(f"{self.source_path or 'config'}: {e}") from None

    # ----- resolved views -------------------------------------------------------------------
    @property
    def home_path(self) -> Path:
        return Path(os.environ.get("CARRYON_HOME") or self.home).expanduser()

    @property
    def cache_path(self) -> Path:
        return Path(os.environ.get("CARRYON_CACHE_DIR") or self.cache_dir
                    or self.home_path / "cache").expanduser()

    def role_specs(self, role: str) -> list[ModelSpec]:
        """The resolved models of a role (a list: targets, ensemble and judges may be several)."""
        value = getattr(self.models, role, None)
        if value is None:
            return []
        entries = value if isinstance(value, list) else [value]
        many = isinstance(value, list)
        return [
            self._resolve(e, f"models.{role}[{i}]" if many else f"models.{role}", role)
            for i, e in enumerate(entries)
        ]

    def role_spec(self, role: str) -> ModelSpec:
        specs = self.role_specs(role)
        if not specs:
            raise ConfigError(f"{self.source_path or 'config'}: models.{role}: not configured")
        return specs[0]

    def all_specs(self) -> dict[str, list[ModelSpec]]:
        return {role: self.role_specs(role) for role in _role_keys(self)}

    def _resolve(self, entry: ModelEntry, where: str, role: str) -> ModelSpec:
        d = self.models.defaults
        merged = {k: getattr(entry, k) if getattr(entry, k) is not None else getattr(d, k)
                  for k in ModelEntry.model_fields}
        if not merged["model"]:
            raise ConfigError(f"{self.source_path or 'config'}: {where}.model: missing")
        api_base = os.environ.get("CARRYON_API_BASE") or merged["api_base"]
        return ModelSpec(
            name=merged["name"] or merged["model"],
            model=merged["model"],
            api_base=api_base,
            api_key_env=merged["api_key_env"],
            temperature=merged["temperature"] if merged["temperature"] is not None else 0.0,
            top_p=merged["top_p"],
            max_tokens=merged["max_tokens"] or 1024,
            seed=merged["seed"],
            stop=tuple(merged["stop"]) if merged["stop"] else None,
            max_concurrency=merged["max_concurrency"] or 16,
            rpm=merged["rpm"],
            timeout_s=merged["timeout_s"] or 120.0,
            max_retries=merged["max_retries"] if merged["max_retries"] is not None else 5,
            structured=merged["structured"] or "json_schema",
            mode=merged["mode"] or "chat",
            where=where,
            reasoning_effort=merged["reasoning_effort"],
            thinking_budget=merged["thinking_budget"],
            max_string_chars=merged["max_string_chars"],
            family=entry.family,
            batch=bool(merged["batch"]),
            batch_size=merged["batch_size"] or 1000,
            batch_poll_s=merged["batch_poll_s"] or 30.0,
            price=merged["price"],
        )

    def config_hash(self) -> str:
        """Hash of what the user configured (never secrets: keys live in the environment).
        Keys added later (``ADDED_LATER``, sections and roles components brought after the
        first release, and fields a section marks ``later``) are left out while unset or at
        their default, so a config keeps the hash (and the run ids) it had before."""
        doc = self.model_dump(mode="json")
        doc.pop("budget_usd", None)  # a cap does not change results
        for key in ADDED_LATER:
            default = type(self).model_fields[key].get_default(call_default_factory=True)
            if doc.get(key) == TypeAdapter(type(default)).dump_python(default, mode="json"):
                del doc[key]
        for name, part in _sections().items():
            key = part["stored_as"] or name
            section = type(self).model_fields[name].get_default(call_default_factory=True)
            default = section.model_dump(mode="json")
            if not part["first_release"] and doc.get(key) == default:
                del doc[key]
                continue
            for field in part["later"]:
                if key in doc and doc[key].get(field) == default.get(field):
                    doc[key].pop(field, None)
        first = {r.name for r in _config_roles() if r.first_release}
        for name in [r.name for r in _config_roles()]:
            if name not in first and doc["models"].get(name) is None:
                doc["models"].pop(name, None)
        for value in doc["models"].values():
            for entry in value if isinstance(value, list) else [value]:
                if not isinstance(entry, dict):
                    continue
                for key in UNHASHED_ENTRY_FIELDS:
                    entry.pop(key, None)
                if entry.get("max_string_chars") is None:
                    entry.pop("max_string_chars", None)  # added later: unset keeps the hash
        for key in UNHASHED_GATEWAY_FIELDS:  # how requests travel, not what they return
            doc["gateway"].pop(key, None)
        blob = json.dumps(doc, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _role_keys(cfg) -> list[str]:
    """Every role key a config has: the fields of ``models:`` and its extra keys."""
    return [*(n for n in type(cfg.models).model_fields if n != "defaults"),
            *(cfg.models.model_extra or {})]


def _sections() -> dict[str, dict]:
    """section name -> its parts' models and how it is read, stored and hashed."""
    out: dict[str, dict] = {}
    for part in registry.config_settings():
        sec = out.setdefault(part.section, {"models": [], "aliases": (), "stored_as": None,
                                            "first_release": False, "later": ()})
        sec["models"].append(part.model)
        sec["aliases"] += tuple(a for a in part.aliases if a not in sec["aliases"])
        sec["stored_as"] = sec["stored_as"] or part.stored_as
        sec["first_release"] |= part.first_release
        sec["later"] += part.later
    out.pop("dataset", None)  # the shared dataset section, with the loaders' keys added
    return out


_MODELS: dict[tuple, type] = {}


def config_model() -> type[Config]:
    """The config's model: ``Config`` with ``models:`` holding every role of the table and of
    the first release, ``dataset:`` with the keys loaders add, and every section components
    register (tasks/core/registry.py ``settings``). The built-in benchmarks' components are
    loaded first, so a config of any benchmark reads (and hashes) the same sections as
    before they moved beside their components; a spec loaded from a path adds its own."""
    load_builtins()
    key = (tuple(registry.config_settings()), tuple(registry.declared_roles()))
    if key in _MODELS:
        return _MODELS[key]
    parts = registry.config_settings()
    ds_parts = tuple(p.model for p in parts if p.section == "dataset")
    dataset = create_model("DatasetConfig", __base__=(DatasetConfig, *ds_parts)) if ds_parts \
        else DatasetConfig
    models = create_model("ModelsConfig", __base__=_ModelsBase,
                          **{r.name: _role_field(r) for r in _config_roles()})
    fields: dict = {"dataset": (dataset, Field(default_factory=dataset)),
                    "models": (models, Field(default_factory=models))}
    for name, sec in _sections().items():
        model = create_model(f"{name.title()}Config", __base__=tuple(sec["models"]))
        alias = {"validation_alias": AliasChoices(name, *sec["aliases"])} if sec["aliases"] else {}
        if sec["stored_as"]:
            alias["serialization_alias"] = sec["stored_as"]
        fields[name] = (model, Field(default_factory=model, **alias))
    _MODELS[key] = create_model("Config", __base__=Config, **fields)
    return _MODELS[key]


_UNION_MEMBERS = {"str", "int", "float", "bool", "ModelEntry", "list[ModelEntry]", "function-after"}


def _field_path(loc: tuple) -> str:
    # pydantic names the member of a union it tried ("exclude_categories.0.str"): not a field.
    parts = [str(p) for p in loc if str(p) not in _UNION_MEMBERS and not str(p).startswith("function-")]
    return ".".join(parts) or "(top level)"


def _model_in(annotation):
    """The pydantic model an annotation holds (X, X | None, list[X], dict[str, X]), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _keys_at(model, loc: tuple) -> list[str]:
    """The field names (and aliases) a mapping at ``loc`` inside ``model`` accepts."""
    for part in loc:
        if isinstance(part, int) or model is None:
            continue  # a list's index: the list's own model holds on
        fields = {**model.model_fields, **{f.alias: f for f in model.model_fields.values() if f.alias}}
        field = fields.get(str(part))
        if field is None:
            return []
        model = _model_in(field.annotation)
    if model is None:
        return []
    return [*model.model_fields, *(f.alias for f in model.model_fields.values() if f.alias)]


def did_you_mean(name: str, valid) -> str:
    """" (did you mean 'x'?)" for the valid name closest to a mistyped one, else ""."""
    close = difflib.get_close_matches(str(name), [str(v) for v in valid], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _suggestion(model, err: dict) -> str:
    """For an unknown key, the nearest valid key at that place in the config."""
    if err.get("type") != "extra_forbidden" or not err["loc"]:
        return ""
    return did_you_mean(err["loc"][-1], _keys_at(model, tuple(err["loc"][:-1])))


def _got(err: dict) -> str:
    value = err.get("input")
    if isinstance(value, (dict, list)) or err.get("type") in ("missing", "extra_forbidden"):
        return ""
    text = repr(value)
    return f" (got {text[:40] + '…' if len(text) > 40 else text})"


def load_config(path: str | Path) -> Config:
    """Read and validate a config file; raise ConfigError naming the file and the field."""
    path = Path(path)
    try:
        data = read_input_bytes(path, "config", MAX_CONFIG_BYTES)
    except InputFileError as e:
        raise ConfigError(str(e)) from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); save the "
                          "config as UTF-8") from None
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        first = " ".join(str(e).split())
        raise ConfigError(f"{path}: not valid YAML: {first[:300]}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML: nested too deeply for a config") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the config must be a mapping of keys, not {type(raw).__name__}")
    if isinstance(raw.get("benchmark"), str):
        # The spec first: its components bring their config sections and roles.
        Config.model_construct(benchmark=raw["benchmark"], source_path=str(path)).spec
    model = config_model()
    try:
        cfg = model.model_validate(raw)
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply for a config") from None
    except ValidationError as e:
        first = e.errors()[0]
        more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
        raise ConfigError(f"{path}: {_field_path(first['loc'])}: {first['msg']}{_got(first)}"
                          f"{_suggestion(model, first)}{more}") from None
    cfg.source_path = str(path)
    _check_benchmark(cfg, path)
    for role in _role_keys(cfg):  # a missing model string fails now
        names = [s.name for s in cfg.role_specs(role)]
        # A name keys a role's rows (a target's conversations, an ensemble answer, a judge's
        # votes): two entries under one name would overwrite each other.
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            what = "target" if role == "targets" else "entry"
            raise ConfigError(f"{path}: models.{role}: duplicate {what} name(s) {dup}; give "
                              "each entry a distinct name")
    return cfg


def _check_benchmark(cfg: Config, path: Path) -> None:
    """The config fits its benchmark: a source the spec allows, only the spec's roles."""
    spec = cfg.spec
    if cfg.dataset.source not in spec.sources:
        raise ConfigError(f"{path}: dataset.source: {cfg.dataset.source!r} is not a source of "
                          f"benchmark {spec.name}; choose from {', '.join(spec.sources)}")
    allowed = spec.config_roles()
    extra = cfg.models.model_extra or {}
    for name in _role_keys(cfg):
        # A key no component declares is refused even when empty; a table role of another
        # benchmark may stay unset.
        if name not in allowed and (name in extra or getattr(cfg.models, name) not in (None, [])):
            raise ConfigError(f"{path}: models.{name}: not a role of benchmark {spec.name}"
                              f"{did_you_mean(name, allowed)} (its roles: {', '.join(allowed)})")
    for name, value in extra.items():  # a component's own role: the entry's shape is its
        try:
            extra[name] = TypeAdapter(_role_field(registry.role(name))[0]).validate_python(value)
        except ValidationError as e:
            first = e.errors()[0]
            raise ConfigError(f"{path}: models.{name}: {_field_path(first['loc'])}: "
                              f"{first['msg']}{_got(first)}") from None


# The pre-flight check of the keys an entry names and whether it is the embedded local model
# live in tasks/model_env.py (the key itself is read by api_key_for, above); imported here,
# where callers look for them.
from tasks.model_env import LOCAL_MODEL_PREFIX, check_secrets, is_smoke_model  # noqa: E402,F401
