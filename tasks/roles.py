"""The table of the shared model roles: which stage calls a role, what it is asked (template
and output schema), how a config may give it (one entry, a list, either), and a rough token
estimate per call for ``carryon plan``.

Config (``models.<role>``), pre-flight (the roles of the selected stages), the plan and the
report read the roles. Which roles a benchmark's config may set is not listed here: each
component (stage, user policy, judge, target policy, ...) declares the roles it calls when it
is registered (tasks/core/registry.py), and a spec's roles are its components' and stages'.
A component that calls a role no other part calls declares it beside itself, as a ``Role``
(the checklists stage its construction roles, CarryOnBench's intents stage its rewriter): this
table holds the roles every benchmark may share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Roles any benchmark's config may set, whatever its components call: embeddings for studies
# that measure in embedding space (tasks/gateway/embed.py).
UNIVERSAL_ROLES = ("embedder",)


@dataclass(frozen=True)
class Role:
    name: str
    stages: tuple[str, ...]  # the stages that call it (pre-flight checks their keys and servers)
    # one: a single entry; list: a list (possibly empty); either: one entry or a list (judges
    # that vote).
    shape: Literal["one", "list", "either"]
    prompt: str | None  # the template it is asked with (its name, prompts.render), None for free text
    schema: str | None  # the output schema's class, by name (documentation and the plan)
    tokens: tuple[int, int | None]  # rough (prompt, completion) tokens per call; None = its own max_tokens
    optional: bool = False  # a stage calls it only when configured
    # Shown in the report's model table (the roles whose model shapes the numbers most).
    in_report: bool = False
    # A role the configs of the first release held: a config hash keeps its entry even unset
    # (null, or [] for a list), as every config was hashed then; any other role is left out
    # of the hash while it is unset, so adding a role never moves an existing config's hash
    # (or its run ids).
    first_release: bool = False


# Play, then the judges; then the sister benchmarks' own roles.
ROLE_TABLE: tuple[Role, ...] = (
    Role("targets", ("episodes",), "list", None, None, (150, None), in_report=True,
         first_release=True),
    Role("user_simulator", ("episodes",), "one", "users/*.j2", None, (500, 60),
         in_report=True, first_release=True),
    Role("move_checker", ("episodes",), "one", "users/move_check.j2", "MoveCheckVerdict",
         (650, 120), optional=True, first_release=True),
    Role("benutil_judge", ("verdicts",), "either", "judges/benutil.j2", "BenUtilVerdict", (350, 40),
         in_report=True, first_release=True),
    Role("safety_judge", ("verdicts",), "either", "judges/safety.j2", "SafetyVerdict", (450, 40),
         in_report=True, first_release=True),
    # The sister benchmarks' judges (tasks/judges/). A judge module names its role here.
    # The engine's judges: one entry, or a list of models that vote (tasks/core/judges.py).
    Role("act_judge", ("episodes", "verdicts"), "either", "judges/act.j2", "ActVerdict",
         (700, 80), in_report=True),
    Role("helpfulness_judge", ("verdicts",), "either", "judges/helpfulness.j2",
         "HelpfulnessVerdict", (600, 120), in_report=True),
    Role("harmfulness_judge", ("verdicts",), "either", "judges/harmfulness.j2",
         "HarmfulnessVerdict", (600, 120), in_report=True),
    # Embeddings through the gateway (tasks/gateway/embed.py), for studies that measure in
    # embedding space (intent drift); no stage of the built-in benchmarks calls it yet.
    Role("embedder", (), "one", None, None, (200, 0), optional=True),
    Role("equivalence_judge", ("verdicts",), "either", "judges/equivalence.j2",
         "EquivalenceVerdict", (300, 60), optional=True),
)

ROLES: list[str] = [r.name for r in ROLE_TABLE]
BY_NAME: dict[str, Role] = {r.name: r for r in ROLE_TABLE}


def report_roles(roles: list[str], known: dict[str, Role] | None = None) -> list[str]:
    """Of a benchmark's roles (``spec.config_roles()``), those the report's model table
    lists; ``known`` holds the roles components declared beyond this table."""
    table = {**(known or {}), **BY_NAME}
    return [r for r in roles if r in table and table[r].in_report]
