"""The ``checklists`` stage: a prepare stage any spec may name, which builds a checklist of
atomic yes/no questions for each of the spec's items (tasks/stages/checklists/build.py: ensemble
answers, guard filter, decomposition, merge, misuse filter) and leaves it where the Ben-Util
judge reads it: ``item.hidden["checklist"]`` as ``{id, question}`` entries and
``item.hidden["checklist_version"]`` its version (``prepared``).

    stages: [checklists, episodes, verdicts, report]
    # or, naming the item's fields: {name: checklists, args: {prompt: question, intent: intent}}

What a checklist is built for (an item's *request*): the item's prompt ``prompt`` (default: the
prompt the spec's first condition opens with) with its benign intent ``hidden[intent]``
stated before it where the item has one (``prompts/checklists/request.j2``), or, where the item
already holds such a prompt, ``prompts[request]`` as it is (CarryOnBench: ``oracle``). An item
that already carries a checklist (``hidden[checklist]``: the file gave one) is not built: it
goes on as it is. The items are the spec's own, as the prepare stages before this one left
them, so a benchmark's loader decides what is built (nothing else is read).

Its roles are ``ensemble``, ``wildguard``, ``decomposer``, ``merger`` and ``misuse_filter``; the
config's ``checklists:`` section sets ``min_harmless`` and ``max_items``; ``carryon plan``
counts the items it builds for (``plan``), and its Prefect subflow is flows/checklists.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

import prompts
from tasks.core.items import ItemError
from tasks.core import registry
from tasks.core.registry import settings, stage
from tasks.core.stages import Pending, Stage, declared_roles
from tasks.model_entry import _Strict
from tasks.stages.checklists.roles import ROLES

# The question count a checklist is assumed to have for the plan before any is stored: the
# mean of the source paper's checklists (7 to 23 questions, 18 on average).
MEAN_QUESTIONS = 18
NOT_BUILT_YET = Pending("no checklist yet: run the checklists stage")
REQUEST_TEMPLATE = "checklists/request.j2"


# Its tables (tables.py, rendered in schema.json beside it), in every warehouse.
registry.tables("tasks.stages.checklists.tables", Path(__file__).with_name("schema.json"))


@settings("checklists", first_release=True)
class ChecklistSettings(_Strict):
    """The config's ``checklists:`` section."""

    min_harmless: int = Field(3, ge=1)  # harmless ensemble answers an item needs to keep one
    # The most questions a checklist keeps: the prompts ask for 7 to max_items, and the merged
    # list is cut to its first max_items (the merger puts the most important first).
    max_items: int = Field(23, ge=1, le=1000)


class ChecklistsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The key of item.prompts the checklist is built for (unset: the prompt the spec's first
    # condition opens with).
    prompt: str | None = None
    # The key of item.hidden that holds the item's benign intent, stated before the prompt.
    intent: str = "intent"
    # The key of item.prompts that already states the request with its intent, used as it is
    # where an item has it (CarryOnBench: oracle).
    request: str | None = None
    # Where the checklist and its version are left (Ben-Util's `checklist` and `version`).
    checklist: str = "checklist"
    version: str = "checklist_version"


@stage("checklists", args=ChecklistsArgs, roles=ROLES)
class Checklists(Stage):
    name, phase, flow = "checklists", "prepare", "flows.checklists:checklists_flow"
    outputs = ("ensemble_answers", "guard_verdicts", "decomposed_items", "merged_items",
               "checklists", "checklist_items", "checklist_queries")

    def __init__(self, args: ChecklistsArgs | None = None):
        self.args = args or ChecklistsArgs()

    def roles(self, spec):
        return declared_roles(self.name)

    def check(self, spec) -> None:
        prompt = self.prompt_key(spec)
        if prompt is None:
            raise ValueError("stages: checklists: args.prompt: name the item prompt the "
                             "checklists are built for (the first condition opens with none)")

    def check_item(self, spec, item) -> None:
        """An item to build for needs its prompt."""
        key = self.prompt_key(spec)
        if not self.given(item) and not item.prompts.get(key) \
                and not (self.args.request and item.prompts.get(self.args.request)):
            raise ItemError(f"prompts.{key}", "the checklists stage builds the item's "
                            "checklist for this prompt, and the item has none")

    # ----- what it builds -----------------------------------------------------------------
    def prompt_key(self, spec) -> str | None:
        return self.args.prompt or spec.conditions[0].prompt

    def given(self, item) -> bool:
        """The item already carries a checklist (its file gave one): nothing to build."""
        return bool(item.hidden.get(self.args.checklist))

    def request(self, spec, item) -> str:
        """What the item's checklist is built for (see the module docstring)."""
        a = self.args
        if a.request and item.prompts.get(a.request):
            return item.prompts[a.request]
        key = self.prompt_key(spec)
        if key not in item.prompts:
            raise KeyError(f"item {item.item_id} has no prompt {key!r}")
        return prompts.render(REQUEST_TEMPLATE, prompt=item.prompts[key],
                              intent=item.hidden.get(a.intent) or None)

    def work(self, spec, items) -> list[tuple[str, str]]:
        """(item id, request) of the items to build, in item order."""
        return [(i.item_id, self.request(spec, i)) for i in items if not self.given(i)]

    # ----- what play and judging read -------------------------------------------------------
    def prepared(self, ctx, items):
        """The items with a checklist: given, or the current one built (latest ``created``),
        with its questions and version; the others with the step and reason that left them
        without one."""
        build = [i.item_id for i in items if not self.given(i)]
        wh = ctx.warehouse
        versions = current_versions(wh, build)
        questions = checklist_questions(wh, versions)
        reasons = drop_reasons(wh, [i for i in build if i not in versions])
        out, left = [], {}
        for i in items:
            if self.given(i):
                out.append(i)
            elif i.item_id in versions:
                out.append(replace(i, hidden={**i.hidden,
                                              self.args.checklist: questions.get(i.item_id, []),
                                              self.args.version: versions[i.item_id]}))
            else:
                left[i.item_id] = reasons.get(i.item_id, NOT_BUILT_YET)
        return out, left

    def foresee(self, cfg, items):
        """For the plan and pre-flight: every item with a checklist, one of the expected size
        (the mean of the stored ones, else ``MEAN_QUESTIONS``) where it will be built."""
        n = round(mean_stored_questions(cfg)[0])
        blank = [{"id": str(k), "question": "?"} for k in range(1, n + 1)]
        return [i if self.given(i) else replace(i, hidden={**i.hidden, self.args.checklist: blank})
                for i in items]

    def plan(self, cfg, limit):
        from tasks.stages.checklists.plan import checklist_plan

        return checklist_plan(cfg, self, limit)


# ----- the stored checklists --------------------------------------------------------------
def current_versions(wh, item_ids: list[str]) -> dict[str, str]:
    """item id -> its current checklist version (latest ``created``)."""
    if not item_ids:
        return {}
    rows = wh.query(
        "SELECT query_id, checklist_version FROM checklists WHERE list_contains(?, query_id) "
        "QUALIFY row_number() OVER (PARTITION BY query_id "
        "ORDER BY created DESC, checklist_version DESC) = 1", [list(item_ids)])
    return {r["query_id"]: r["checklist_version"] for r in rows}


def checklist_questions(wh, versions: dict[str, str]) -> dict[str, list[dict]]:
    """item id -> the questions of its checklist version, as ``{id, question}`` in order."""
    if not versions:
        return {}
    keys = [f"{q}\x1f{v}" for q, v in versions.items()]
    rows = wh.query(
        "SELECT query_id, item_id, question FROM checklist_items "
        "WHERE list_contains(?, query_id || chr(31) || checklist_version) "
        "ORDER BY query_id, item_id", [keys])
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["query_id"], []).append({"id": r["item_id"], "question": r["question"]})
    return out


def drop_reasons(wh, item_ids: list[str]) -> dict[str, str]:
    """item id -> why the latest run that processed it built no checklist."""
    if not item_ids:
        return {}
    rows = wh.query("SELECT query_id, step, reason FROM checklist_queries "
                    "WHERE list_contains(?, query_id) AND step IS NOT NULL", [list(item_ids)])
    return {r["query_id"]: f"no checklist: {r['step']}: {r['reason']}" for r in rows}


def mean_stored_questions(cfg) -> tuple[float, str]:
    """The mean question count of the checklists stored in the config's home, and where the
    number comes from (``MEAN_QUESTIONS`` when none is stored)."""
    path = cfg.home_path / "warehouse.duckdb"
    if path.exists():
        try:
            from warehouse import Warehouse

            row = Warehouse(path).query(
                "SELECT avg(n_items) AS m, count(*) AS n FROM checklists")[0]
            if row["n"]:
                return float(row["m"]), f"mean of {row['n']} stored checklists"
        except Exception:  # noqa: BLE001 - a home another process holds: the default
            pass
    return float(MEAN_QUESTIONS), "the source paper's mean checklist size (none stored yet)"
