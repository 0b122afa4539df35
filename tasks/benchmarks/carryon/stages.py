"""CarryOnBench's own stage, registered like any benchmark's and named in its spec before the
shared ``checklists`` (which builds each query's checklist), ``episodes`` (which plays its
conversations), ``verdicts`` (which judges them with Ben-Util and safety) and ``report``:

- ``intents`` (prepare): the benign intent of each selected query, rewritten from the safe
  context of CASE-Bench by the ``intent_rewriter`` role (tasks/benchmarks/carryon/intents.py),
  and the oracle prompt that states it before the query. It defines the run's work (the
  selected queries, tasks/benchmarks/carryon/queries.py: its plan, its listing, its memo rows)
  and prepares the items the later stages read: only queries with a benign intent, each with
  ``hidden["intent"]`` and ``prompts["oracle"]`` (``prepared``, prepared.py).

Its role, ``intent_rewriter``, is declared here.
"""

from __future__ import annotations

from tasks.core.registry import stage
from tasks.core.stages import Stage, declared_roles
from tasks.roles import Role

SUBFLOWS = "tasks.benchmarks.carryon.subflows"  # the stage's Prefect subflow, beside it
# Its one role (configs of the first release held it: tasks/roles.py ``first_release``).
INTENT_REWRITER = Role("intent_rewriter", ("intents",), "one", "carryon/intent.j2",
                       "IntentStatement", (300, 80), first_release=True)


@stage("intents", roles=(INTENT_REWRITER,))
class Intents(Stage):
    name, phase, flow = "intents", "prepare", f"{SUBFLOWS}:intents_flow"
    outputs = ("queries", "intents")
    defines_work = True

    def roles(self, spec):
        return declared_roles(self.name)

    def check(self, spec) -> None:
        # Its work is CarryOnBench's selected queries: in a spec whose items another loader
        # reads, it would prepare (and plan, and list) queries that are not the spec's items.
        if spec.loader != "carryon":
            raise ValueError(f"stages: intents rewrites the benign intents of CarryOnBench's "
                             f"queries (loader carryon), but this spec's loader is "
                             f"{spec.loader or 'none'}: its work would not be the spec's items")

    # ----- the run's work: the selected queries ----------------------------------------------
    def select(self, cfg, limit):
        from tasks.core.items import select_items

        return select_items(cfg, limit)

    def rows(self, ctx):
        from tasks.benchmarks.carryon.queries import run_queries

        return [q.to_row() for q in run_queries(ctx)]

    def plan(self, cfg, limit):
        from tasks.benchmarks.carryon.plan import carryon_plan  # play and judging too

        return carryon_plan(cfg, limit)

    def listing(self, cfg, limit) -> tuple[list[dict], list[dict], str]:
        from tasks.benchmarks.carryon.queries import select_queries

        queries = select_queries(cfg, limit)
        rows = [{"id": q.query_id, "category": q.category, "query": q.query,
                 "context": q.context_line()} for q in queries]
        return [q.as_dict() for q in queries], rows, f"{len(queries)} queries selected"

    # ----- what the later stages read -------------------------------------------------------
    def prepared(self, ctx, items):
        """The items with a benign intent, each with its intent and oracle prompt
        (prepared.py); the others with why they have none."""
        from tasks.benchmarks.carryon.prepared import prepared_items

        return prepared_items(ctx, items)

    def foresee(self, cfg, items):
        from tasks.benchmarks.carryon.prepared import foreseen_items

        return foreseen_items(cfg, items)
