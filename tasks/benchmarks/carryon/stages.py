"""CarryOnBench's own stage, registered like any benchmark's and named in its spec beside the
engine's ``episodes`` (which plays its conversations), ``verdicts`` (which judges them with
Ben-Util and safety) and ``report``:

- ``checklists`` (prepare): seemingly harmful queries -> per-query checklists of atomic items
  (tasks/benchmarks/carryon/checklists.py: ensemble answers, WildGuard filter, decomposition,
  merge, misuse filter). It defines the run's work (the selected queries,
  tasks/benchmarks/carryon/queries.py) and prepares the items the episodes and verdicts
  stages read: only queries with a current checklist, each with the benign intent, oracle
  prompt and checklist (``prepared``, prepared.py).

Its roles are the role table's (tasks/roles.py).
"""

from __future__ import annotations

from tasks.core.registry import stage
from tasks.core.stages import Stage, table_roles

SUBFLOWS = "tasks.benchmarks.carryon.subflows"  # the stages' Prefect subflows, beside them


@stage("checklists")
class Checklists(Stage):
    name, phase, flow = "checklists", "prepare", f"{SUBFLOWS}:checklists_flow"
    outputs = ("queries", "intents", "ensemble_answers", "guard_verdicts", "decomposed_items",
               "merged_items", "checklists", "checklist_items", "checklist_queries")
    defines_work = True

    def roles(self, spec):
        return table_roles(self.name)

    # ----- the run's work: the selected queries ----------------------------------------------
    def select(self, cfg, limit):
        from tasks.benchmarks.carryon.queries import select_queries

        return select_queries(cfg, limit)

    def rows(self, ctx):
        from tasks.benchmarks.carryon.queries import run_queries

        return [q.to_row() for q in run_queries(ctx)]

    def plan(self, cfg, limit):
        from tasks.benchmarks.carryon.plan import carryon_plan  # every stage of the spec

        return carryon_plan(cfg, limit)

    def listing(self, cfg, limit) -> tuple[list[dict], list[dict], str]:
        queries = self.select(cfg, limit)
        rows = [{"id": q.query_id, "category": q.category, "query": q.query,
                 "context": q.context_line()} for q in queries]
        return [q.as_dict() for q in queries], rows, f"{len(queries)} queries selected"

    # ----- what play reads ------------------------------------------------------------------
    def prepared(self, ctx, items):
        """The items with a current checklist, each with its benign intent, oracle prompt and
        checklist (prepared.py); the others with the step and reason that left them without
        one."""
        from tasks.benchmarks.carryon.prepared import prepared_items

        return prepared_items(ctx, items)
