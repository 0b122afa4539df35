"""Stages: the steps a spec's ``stages:`` lists, in pipeline order, each a registered component.

    @stage("episodes")
    class Episodes(Stage):
        phase, flow, outputs = "play", "flows.episodes:episodes_flow", ("episodes", ...)

A stage says what the engine needs to know about it and nothing is written per benchmark:

- ``phase``: ``prepare`` (builds what play reads: checklists, intents), ``play`` (plays
  the conversations; a spec has exactly one), ``judge`` or ``report``. A spec lists its stages
  in this order.
- ``flow``: ``"module:function"``, its Prefect subflow (flows/ composes; tasks/ never imports
  flows/, so the flow is named, not imported).
- ``outputs``: the warehouse tables it writes. A stage's memo (tasks/engine/stage_memo.py) reads the
  tables of the spec's stages before it as its inputs.
- ``reads``: the tables it needs a stage before it to write (the verdicts stage judges the
  ``episodes`` the episodes stage plays): a spec whose stages do not fit is refused at load.
- ``runs_judges``: it runs the spec's ``judges:`` (a spec that names judges needs one such
  stage).
- ``roles(spec)``: the model roles it calls, and which of them only when configured
  (pre-flight, ``carryon plan``, which roles a config may set).
- ``check(spec)``: what the stage needs of the spec (raises ValueError, which the spec loader
  turns into one line naming the file).

The play stage also defines the run's *work* (the units the other stages follow): ``select``
(pre-flight; a bad dataset file fails here), ``rows`` (the stage memos' fingerprint),
``plan`` (``carryon plan``: calls, tokens and cost of play and judging) and ``listing``
(``carryon data``). A prepare stage may define it instead (``defines_work``: CarryOnBench's
``intents``, over its selected queries); it must then work on the spec's own items (its
``check`` refuses another loader). A prepare stage says what it leaves for play and judging
(``prepared``), what the plan may expect of it before it ran (``foresee``) and its own
part of the plan (``plan``).

Built in: ``checklists`` (a prepare stage any spec names), ``episodes``, ``verdicts`` and
``report`` (tasks/stages/); CarryOnBench's ``intents`` (tasks/benchmarks/carryon/stages.py,
listed in its spec's ``components:``).
"""

from __future__ import annotations

from tasks.core import registry

PHASES = ("prepare", "play", "judge", "report")


class Pending(str):
    """Why a prepare stage left an item out when it is because the stage has not prepared it
    yet (it has not run for the item: "no checklist yet: run the checklists stage"), not a
    decision it made (a guard that kept no answer). A play stage that gets no item, only
    pending ones, did none of its work: it fails rather than play nothing."""


class Stage:
    """The defaults of a stage: no tables, no roles, nothing asked of the spec."""

    name = ""
    phase = "judge"
    flow = ""
    outputs: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    runs_judges = False
    defines_work = False  # a prepare stage whose units are the run's work (see above)

    def roles(self, spec) -> tuple[list[str], set[str]]:
        return [], set()

    def check(self, spec) -> None:
        return None

    # A prepare stage also says what play and judging read of the items it prepared, what the
    # plan and pre-flight may expect of them, and its part of the plan.
    def prepared(self, ctx, items: list) -> tuple[list, dict[str, str]]:
        """The items as this stage left them (what it built added), and the items it left out
        with why ({item id: reason})."""
        return items, {}

    def check_item(self, spec, item) -> None:
        """What the stage needs of an item of ``spec`` (``ItemError`` naming the field)."""
        return None

    def foresee(self, cfg, items: list) -> list:
        """The items as this stage will leave them, for the plan and pre-flight (before it has
        run): what it will build, with the expected size."""
        return items

    def plan(self, cfg, limit: int | None) -> tuple[list[dict], list[str]]:
        """Its rows of ``carryon plan`` (calls, tokens and prices per role) and notes. The
        work stage's plan is the run's play and judging too (``BenchmarkSpec.work_stage``)."""
        return [], []


def component_roles(spec, kinds_names) -> tuple[list[str], set[str]]:
    """(roles, optional roles) declared by the named components, in order: what a stage run
    by components (the episode engine's) calls."""
    roles, optional = [], set()
    for kind, names in kinds_names:
        for n in names:
            comp = registry.lookup(kind, n)
            roles += [r for r in comp.roles if r not in roles]
            optional |= optional_roles(comp)
    return roles, optional


def optional_roles(comp) -> set[str]:
    """The roles a component calls only when the config sets them: all of an optional
    judge's, and those it registered as ``optional_roles`` (the scripted user's move checker)."""
    if comp.kind == "judge" and comp.factory.optional:
        return set(comp.roles)
    return set(comp.meta.get("optional_roles", ()))


def declared_roles(stage: str) -> tuple[list[str], set[str]]:
    """(roles, optional roles) a stage registered (``@stage(name, roles=...)``): the fixed roles
    a stage of its own calls (the checklists stage's construction roles)."""
    comp = registry.lookup("stage", stage)
    known = registry.known_roles()
    return list(comp.roles), {r for r in comp.roles if known[r].optional}
