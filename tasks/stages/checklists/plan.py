"""The checklists stage's part of ``carryon plan``: its five roles' calls over the items it
would build for, tokens and prices (tasks/gateway/prices.py).

Counts are exact for the ensemble, the merge and the misuse filter (per item: one answer per
ensemble model, one merge, one filter) and upper bounds for the guard and the decomposition
(they assume no answer is dropped). Tokens per call are the role table's estimates with the
answers the later steps read (half an ensemble model's ``max_tokens``), or, where this home
recorded calls of a role (a pilot run), their mean.
"""

from __future__ import annotations

from tasks.core.items import select_items
from tasks.engine.plan_tokens import recorded_tokens
from tasks.gateway.prices import MEMO_NAME, plan_row

from tasks.stages.checklists.roles import ROLES as ROLE_DECLS

ROLES = tuple(r.name for r in ROLE_DECLS)
TOKENS = {r.name: r.tokens for r in ROLE_DECLS}
# A merge prompt shows each kept answer's questions: about this many tokens an answer.
MERGE_TOKENS_PER_ANSWER = 400


def checklist_plan(cfg, stage, limit: int | None) -> tuple[list[dict], list[str]]:
    spec = cfg.spec
    items = select_items(cfg, limit)
    for s in spec.stage_objects():  # as the prepare stages before this one leave them
        if s is stage:
            break
        if s.phase == "prepare":
            items = s.foresee(cfg, items)
    todo = [i for i in items if not stage.given(i)]
    n, ens = len(todo), cfg.role_specs("ensemble")
    ens_out = max((s.max_tokens for s in ens), default=512) // 2
    calls = {"ensemble": n * len(ens), "wildguard": n * len(ens), "decomposer": n * len(ens),
             "merger": n, "misuse_filter": n}
    # Beside the role table's prompt estimate (a template with a typical request): the
    # answers a step reads.
    extra = {"wildguard": ens_out, "decomposer": ens_out,
             "merger": len(ens) * MERGE_TOKENS_PER_ANSWER}
    recorded = recorded_tokens(cfg)
    memo = cfg.cache_path / MEMO_NAME
    rows = []
    for role in ROLES:
        specs = cfg.role_specs(role)
        if not specs or not calls[role]:
            continue
        base_in, base_out = TOKENS[role]
        in_tokens = round(base_in + extra.get(role, 0))
        out_tokens = base_out if base_out is not None else ens_out
        if role in recorded:
            in_tokens, out_tokens = round(recorded[role][1]), round(recorded[role][2])
        # The ensemble's calls are spread over its models; the other roles use one model.
        n_priced = calls[role] if role == "ensemble" else calls[role] * len(specs)
        # What the providers reported cached for this home's calls of the role, where any.
        cached = recorded.get(role, (0, 0, 0, None))[3]
        row = plan_row(role, specs, n_priced, in_tokens, out_tokens,
                       (lambda s: 0.0) if cached is None else (lambda s, x=cached: x), memo)
        rows.append({**row, "calls": calls[role], "prompt_tokens": calls[role] * in_tokens,
                     "completion_tokens": calls[role] * out_tokens})
    given = len(items) - n
    notes = [f"checklists: built for {n} item(s)"
             + (f" ({given} carry a checklist of their own)" if given else "")
             + f" by {len(ens)} ensemble model(s), the guard, the decomposer, the merger and "
               "the misuse filter; guard and decomposer counts assume no answer is dropped "
               "(upper bounds)."]
    if recorded and any(r in recorded for r in ROLES):
        notes.append("checklists: tokens per call from the calls recorded in this home for "
                     + ", ".join(f"{r} ({recorded[r][0]})" for r in ROLES if r in recorded) + ".")
    return rows, notes
