"""The checklists stage's models (roles ``ensemble``, ``wildguard``, ``decomposer``, ``merger``,
``misuse_filter``) with the stage's token budgets, checked before anything is written."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tasks.config import Config, ConfigError, ModelSpec
from tasks.roles import Role

# The construction roles, called by this stage and nothing else (configs of the first release
# held them: their entries stay in every config's hash, tasks/roles.py ``first_release``).
ROLES = (
    Role("ensemble", ("checklists",), "list", "checklists/ensemble.j2", None, (230, None),
         first_release=True),
    Role("wildguard", ("checklists",), "one", "checklists/wildguard.j2", "GuardVerdict",
         (250, 20), first_release=True),
    Role("decomposer", ("checklists",), "one", "checklists/decompose.j2", "Decomposition",
         (550, 500), first_release=True),
    Role("merger", ("checklists",), "one", "checklists/merge.j2", "MergedList", (450, 1000),
         first_release=True),
    Role("misuse_filter", ("checklists",), "one", "checklists/misuse.j2", "MisuseVerdicts",
         (800, 600), first_release=True),
)


@dataclass(frozen=True)
class Roles:
    ensemble: list[ModelSpec]
    guard: ModelSpec
    decomposer: ModelSpec
    merger: ModelSpec
    misuse: ModelSpec
    min_harmless: int
    max_items: int = 23


# Token budgets of the stage's roles when neither the role's entry nor ``models.defaults`` sets
# ``max_tokens`` (the generic fallback, 1024, cuts a detailed answer or a long merged list).
# A merged list of 23 items with categories and answer ids runs to about 1,500 tokens, and the
# merger may write more before the cap; the misuse filter writes a decision and a reason per
# item; WildGuard writes three short lines (or, in chat mode, three booleans as JSON).
ROLE_MAX_TOKENS = {"ensemble": 2048, "wildguard": 128, "decomposer": 2048, "merger": 4096,
                   "misuse_filter": 3072}


def _budgeted(cfg: Config, role: str, spec: ModelSpec, entry) -> ModelSpec:
    if entry is not None and entry.max_tokens is None and cfg.models.defaults.max_tokens is None:
        return dataclasses.replace(spec, max_tokens=ROLE_MAX_TOKENS[role])
    return spec


def resolve_roles(cfg: Config) -> Roles:
    """The stage's models; configuration mistakes that would drop every query fail here."""
    where = cfg.source_path or "config"
    ensemble = cfg.role_specs("ensemble")  # distinct names (the config's check): answer ids
    if len(ensemble) < cfg.checklists.min_harmless:
        raise ConfigError(f"{where}: checklists.min_harmless: {cfg.checklists.min_harmless} "
                          f"exceeds the {len(ensemble)} ensemble model(s); no item could be kept")
    ensemble = [_budgeted(cfg, "ensemble", s, e) for s, e in zip(ensemble, cfg.models.ensemble)]
    one = {role: _budgeted(cfg, role, cfg.role_spec(role), getattr(cfg.models, role))
           for role in ("wildguard", "decomposer", "merger", "misuse_filter")}
    return Roles(ensemble, one["wildguard"], one["decomposer"], one["merger"],
                 one["misuse_filter"], cfg.checklists.min_harmless, cfg.checklists.max_items)
