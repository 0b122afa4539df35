"""The one table of model roles: which stage calls a role, what it is asked (template and
output schema), how a config may give it (one entry, a list, either), and a rough token
estimate per call for ``carryon plan``.

Config (``models.<role>``), pre-flight (the roles of the selected stages), the plan and the
report read this table; nothing else lists roles. A role belongs to the benchmarks that
use it (``benchmarks``): a config of one benchmark may leave the others' roles unset.

Adding a role = one row here, a stage that calls it and a spec that names its stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

CARRYON = "carryon"
ANY = "*"  # a role every benchmark may use


@dataclass(frozen=True)
class Role:
    name: str
    stages: tuple[str, ...]  # the stages that call it (pre-flight checks their keys and servers)
    # one: a single entry; list: a list (possibly empty); either: one entry or a list (judges
    # that vote).
    shape: Literal["one", "list", "either"]
    prompt: str | None  # the template it is asked with (prompts/<...>), None for free text
    schema: str | None  # the output schema's class, by name (documentation and the plan)
    tokens: tuple[int, int | None]  # rough (prompt, completion) tokens per call; None = its own max_tokens
    optional: bool = False  # a stage calls it only when configured
    benchmarks: tuple[str, ...] = (CARRYON,)
    # Shown in the report's model table (the roles whose model shapes the numbers most).
    in_report: bool = False


# Pipeline order: CarryOnBench's stages, then the sister benchmarks' own roles.
ROLE_TABLE: tuple[Role, ...] = (
    Role("intent_rewriter", ("checklists", "simulate"), "one", "intent.j2", "IntentStatement",
         (300, 80)),
    Role("ensemble", ("checklists",), "list", "checklists/ensemble.j2", None, (230, None)),
    Role("wildguard", ("checklists",), "one", "checklists/wildguard.j2", "GuardVerdict", (250, 20)),
    Role("decomposer", ("checklists",), "one", "checklists/decompose.j2", "Decomposition",
         (550, 500)),
    Role("merger", ("checklists",), "one", "checklists/merge.j2", "MergedList", (450, 1000)),
    Role("misuse_filter", ("checklists",), "one", "checklists/misuse.j2", "MisuseVerdicts",
         (800, 600)),
    Role("targets", ("simulate", "episodes"), "list", None, None, (150, None),
         benchmarks=(ANY,), in_report=True),
    Role("user_simulator", ("simulate", "episodes"), "one", "user/*.j2", None, (500, 60),
         benchmarks=(ANY,), in_report=True),
    Role("move_checker", ("simulate",), "one", "user/move_check.j2", "MoveCheckVerdict",
         (650, 120), optional=True),
    Role("benutil_judge", ("judge",), "either", "judge/benutil.j2", "BenUtilVerdict", (350, 40),
         in_report=True),
    Role("safety_judge", ("judge",), "either", "judge/safety.j2", "SafetyVerdict", (450, 40),
         in_report=True),
    # The sister benchmarks' judges (tasks/judges/). A judge module names its role here.
    Role("act_judge", ("episodes", "verdicts"), "one", "judges/act.j2", "ActVerdict", (700, 80),
         benchmarks=("clarify",), in_report=True),
    Role("helpfulness_judge", ("verdicts",), "one", "judges/helpfulness.j2",
         "HelpfulnessVerdict", (600, 120), benchmarks=("opensafeintent",), in_report=True),
    Role("harmfulness_judge", ("verdicts",), "one", "judges/harmfulness.j2",
         "HarmfulnessVerdict", (600, 120), benchmarks=("opensafeintent",), in_report=True),
    # Embeddings through the gateway (tasks/gateway/embed.py), for studies that measure in
    # embedding space (intent drift); no stage of the built-in benchmarks calls it yet.
    Role("embedder", (), "one", None, None, (200, 0), optional=True, benchmarks=(ANY,)),
    Role("equivalence_judge", ("verdicts",), "one", "judges/equivalence.j2",
         "EquivalenceVerdict", (300, 60), optional=True, benchmarks=("clarify",)),
)

ROLES: list[str] = [r.name for r in ROLE_TABLE]
BY_NAME: dict[str, Role] = {r.name: r for r in ROLE_TABLE}
# The roles a config had before this table existed, fixed: a config hash leaves every other
# role out while it is unset, so an existing config keeps its hash (and its run ids) whatever
# roles are added here later.
HASHED_ROLES: tuple[str, ...] = (
    "intent_rewriter", "ensemble", "wildguard", "decomposer", "merger", "misuse_filter",
    "targets", "user_simulator", "move_checker", "benutil_judge", "safety_judge",
)


def benchmark_roles(benchmark: str) -> list[str]:
    """The roles a benchmark's config may set."""
    return [r.name for r in ROLE_TABLE if benchmark in r.benchmarks or ANY in r.benchmarks]


def stage_roles(stage: str) -> list[str]:
    """The roles a stage calls, in table order."""
    return [r.name for r in ROLE_TABLE if stage in r.stages]


def optional_roles() -> set[str]:
    return {r.name for r in ROLE_TABLE if r.optional}


def tokens(name: str) -> tuple[int, int | None]:
    return BY_NAME[name].tokens if name in BY_NAME else (0, None)


def report_roles(benchmark: str = CARRYON) -> list[str]:
    """The roles the report's model table lists for a benchmark."""
    return [r for r in benchmark_roles(benchmark) if BY_NAME[r].in_report]
