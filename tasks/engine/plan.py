"""``carryon plan``: calls per role, tokens and cost, before anything is spent.

``make_plan`` is the command's one entry: the spec's work stage plans the run's play and
judging, every other prepare stage its own roles (tasks/stages/), then the lines every
benchmark gets (the total, batch paths, the cost, a thinking budget that leaves no room for
the answer, a missing API key). ``episode_plan`` is the episode engine's (the ``episodes``
stage's); CarryOnBench's is tasks/benchmarks/carryon/plan.py.

The episode plan is exactwhere the spec fixes the count (one target call per single-turn episode, one judge
call per judged turn), upper bounds where it depends on the target (a reactive user speaks
only when the target asks; episodes may end before their turn cap). Tokens per call are the
items' own opening prompts (about 4 characters a token) plus, for a target, the exchanges
before its turn, and for a template role its template's own text (tasks/engine/plan_tokens.py), with
answers at half their max_tokens.
"""

from __future__ import annotations

import prompts
from tasks.engine.episode import plan_episodes, run_seats
from tasks.core.items import check_items, select_items
from tasks.gateway.prices import MEMO_NAME, batch_notes, cost_lines, plan_row
from tasks.core import registry
from tasks.engine.plan_tokens import episode_prompts, template_tokens
from tasks.model_keys import plan_warnings


def _user_template(spec, work) -> float | None:
    """The simulated user's prompt size: the template its policies name (``template``, e.g.
    tasks/users/reactive.py's), the largest when several."""
    sizes = [template_tokens(spec.user(c).template)
             for c in {c.name: c for _, c, _, _ in work}.values()]
    return max((x for x in sizes if x), default=None)


# Tokens an answer needs beside a thinking budget, where the role has no estimate of its own.
MIN_ANSWER_TOKENS = 256


def make_plan(cfg, limit: int | None = None,
              key_warnings: bool = True) -> tuple[list[dict], list[str]]:
    """The plan's rows and notes. ``key_warnings=False`` leaves out the missing-key lines,
    which ask litellm (a 6 s import): the report's cost section reads the rows only.

    The work stage plans the run's play and judging (and, a prepare stage that defines the
    work, its own calls); every other prepare stage adds its own roles (the checklists
    stage: its construction roles over the items it would build for). Rows come in the
    order of the spec's roles."""
    spec = cfg.spec
    # The templates a run of this benchmark would render: its own prompts/ first.
    with prompts.benchmark_prompts(spec.prompts_dir):
        work = spec.work_stage()
        # An item a component cannot use is one line naming its file and row (DataError).
        check_items(cfg, foreseen_items(cfg, work.select(cfg, limit)))
        rows, notes = work.plan(cfg, limit)
        for stage in spec.stage_objects():
            if stage.phase == "prepare" and stage is not work:
                r, n = stage.plan(cfg, limit)
                rows, notes = rows + r, notes + n
    order = {role: i for i, role in enumerate(spec.config_roles())}
    rows.sort(key=lambda r: order.get(r["role"], len(order)))
    cached = sum(r["cached_usd"] for r in rows if r["cached_usd"] is not None)
    notes += [f"{sum(r['calls'] for r in rows)} calls in all.",
              *batch_notes({r["role"]: cfg.role_specs(r["role"]) for r in rows}),
              "calls already in the cache are not sent again: a rerun costs only what changed.",
              # The headline last: the total, or "lower bound" and the models left out of it.
              *cost_lines(rows, f"${cached:,.2f} with provider prompt caching where the prompt "
                                "layout allows it (cached_usd; roles whose prompts share no "
                                "prefix are priced live there).")]
    return rows, notes + reasoning_warnings(cfg) + (plan_warnings(cfg) if key_warnings else [])


def foreseen_items(cfg, items: list) -> list:
    """The items as the spec's prepare stages will leave them (tasks/core/stages.py
    ``foresee``): what the plan and pre-flight read before those stages have run."""
    for stage in cfg.spec.stage_objects():
        if stage.phase == "prepare":
            items = stage.foresee(cfg, items)
    return items


def reasoning_warnings(cfg) -> list[str]:
    """A warning per model entry whose max_tokens cannot hold its thinking budget plus the
    answer: the budget would eat the answer (reasoning_exhausted, or a cut-off JSON)."""
    answers = {name: r.tokens[1] for name, r in registry.known_roles().items()}
    out = []
    for role in cfg.all_specs():
        for spec in cfg.role_specs(role):
            if spec.thinking_budget is None:
                continue
            answer = max(answers.get(role) or 0, MIN_ANSWER_TOKENS)
            need = spec.thinking_budget + answer
            if spec.max_tokens < need:
                out.append(f"warning: {spec.where} ({spec.model}): max_tokens {spec.max_tokens} "
                           f"cannot hold thinking_budget {spec.thinking_budget} plus an answer "
                           f"(about {answer} tokens); set max_tokens to at least {need}")
    return out


def episode_plan(cfg, limit: int | None) -> tuple[list[dict], list[str]]:
    """(rows, notes) like CarryOnBench's plan, priced by tasks/gateway/prices.py."""
    spec = cfg.spec
    items = foreseen_items(cfg, select_items(cfg, limit))
    seats = run_seats(cfg)
    targets = [s.model for s in seats if s.model is not None]
    work, skipped = plan_episodes(spec, items, seats, cfg.seed, cfg.scripts)
    n_eps = len(work)
    # A scripted episode's length is its script's (plus the opening exchange); a seat without
    # a model (a deterministic policy) makes no call.
    turns = [(min(c.max_turns, len(p) + 1) if p else c.max_turns, t) for _, c, t, p in work]
    target_calls = sum(n for n, t in turns if t.model is not None)
    opening_tokens = (sum(len(item.prompts[c.prompt]) for item, c, _, _ in work)
                      // prompts.CHARS_PER_TOKEN // max(n_eps, 1))
    calls: dict[str, int] = {"targets": target_calls}
    bound: set[str] = {"targets"} if any(c.max_turns > 1 for c in spec.conditions) else set()
    for _, c, seat, _ in work:
        for role, n in spec.user(c).calls(c).items():
            calls[role] = calls.get(role, 0) + n
            bound.add(role)
    for n_turns, seat in turns:  # a target policy's own calls beside its model's, per turn
        for role, n in seat.policy.calls(None).items():
            calls[role] = calls.get(role, 0) + n * n_turns
    judged = []
    for name, judge in spec.judge_objects():
        if judge.role and not cfg.role_specs(judge.role):
            continue  # optional and not configured (pre-flight refuses a missing required one)
        judged.append(judge.kind)
        if judge.role:
            # The judge's requests per target turn (one for most, one per checklist item for
            # Ben-Util). A user policy that reads acts sends the act judge's very requests for
            # the turns it reads, so those come from the cache: the role's distinct calls are
            # the judge's alone. Re-asks (Ben-Util's evidence) depend on the answers: not counted.
            shared = judge.role in {r for _, c, _, _ in work
                                    for r in registry.lookup("user", c.user).roles}
            asked = sum(n * judge.requests_per_turn(item)
                        for (n, _), (item, _, _, _) in zip(turns, work))
            n = asked * len(cfg.role_specs(judge.role))  # each voting model judges
            calls[judge.role] = (max(calls.get(judge.role, 0), n) if shared
                                 else calls.get(judge.role, 0) + n)
            if spec.max_turns > 1:
                bound.add(judge.role)
    target_out = max((s.max_tokens for s in targets), default=512) // 2
    user_out = (registry.role("user_simulator").tokens[1] if registry.role("user_simulator") else 60) or 60
    # A target's prompt: the opening and every earlier exchange; a template role's: its
    # template's own text (measured: tasks/engine/plan_tokens.py) with the opening and one answer.
    target_in = episode_prompts([n for n, t in turns if t.model is not None], opening_tokens,
                                target_out, user_out)
    rows = []
    for role, n in calls.items():
        specs = cfg.role_specs(role)
        if not specs or not n:
            continue
        known = registry.role(role)
        base_in, base_out = known.tokens if known else (0, None)
        base_in = (_user_template(spec, work) if role == "user_simulator" else None) \
            or template_tokens(known.prompt if known else None) or base_in
        out_tokens = base_out if base_out is not None else target_out
        in_tokens = round(target_in if role == "targets" else base_in + opening_tokens + target_out)
        # Live and batch prices; no shared prefix is estimated for these prompts, so the
        # cached column is the live price.
        rows.append(plan_row(role, specs, n, in_tokens, out_tokens,
                             memo=cfg.cache_path / MEMO_NAME))
    notes = [
        f"{spec.title}: {len(items)} items, {len(spec.conditions)} conditions, "
        f"{len(seats)} target(s): {n_eps} episodes.",
        "judges: " + (", ".join(judged) or "none") + ".",
    ]
    if skipped:
        notes.append("conditions an item lacks (no episode): " + ", ".join(
            f"{k} {v}" for k, v in sorted(skipped.items())) + ".")
    # Only the roles the plan has rows for (an optional role the config leaves unset, such
    # as the move checker, makes no call).
    bound &= {r["role"] for r in rows}
    if bound:
        notes.append("upper bounds (episodes may stop before their turn cap): "
                     + ", ".join(sorted(bound)) + ".")
    return rows, notes
