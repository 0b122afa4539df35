"""Stage 2's plan: the scripts a query gets and the calls a config sends per role, with and
without prefix sharing (``carryon plan`` and the pre-flight estimate). tasks/benchmarks/carryon/simulate.py
re-exports these names.
"""

from __future__ import annotations

from tasks.engine.plan_tokens import MESSAGE_TOKENS
from tasks.users.scripts import SampledScript, sample_scripts
from tasks.core.users import CHECKER_ROLE

# The roles the simulation calls (here, not in simulate.py, so this module imports nothing
# of the simulation's).
TARGET_ROLE = "targets"
SIMULATOR_ROLE = "user_simulator"


def scripts_for(cfg, query_id: str) -> list[SampledScript]:
    f = cfg.scripts
    return sample_scripts(cfg.seed, query_id, tuple(f.lengths), f.bc_per_length, f.nc_per_length)


# ----- planning ------------------------------------------------------------------------------
def _query_calls(scripts: list[SampledScript]) -> dict:
    """Simulation calls of one (target, query), oracle excluded (the paper's count). A move
    checker, when configured, checks every simulator turn once (before resamples)."""
    moves = sum(f.n_moves for f in scripts)
    prefixes = {tuple(f.moves[:k]) for f in scripts for k in range(1, f.n_moves + 1)}
    return {"without": {"targets": len(scripts) + moves, "user_simulator": moves},
            "with": {"targets": 1 + len(prefixes), "user_simulator": len(prefixes)}}


def plan_calls(cfg, n_queries: int, query_ids: list[str] | None = None) -> dict:
    """Calls per role with and without prefix sharing, counting distinct prefixes.

    Scripts are sampled per query id; without ids (a plan before the data is read) the query
    index is the key, which gives the same distribution but not the exact scripts of a run.
    ``planned`` is what this config sends on a cold cache: with ``share_prefix`` off every
    conversation samples its own turns, except that a temperature-0 target's identical first
    answers still coincide in the cache (and everything coincides when both the target and
    the simulator are at temperature 0). Oracle calls (one per target and query) are counted
    in ``targets`` of every column.
    """
    keys = list(query_ids) if query_ids is not None else [str(i) for i in range(n_queries)]
    targets = cfg.role_specs(TARGET_ROLE)
    without = {"targets": 0, "user_simulator": 0}
    with_ = {"targets": 0, "user_simulator": 0}
    n_scripts = 0
    first = 0  # first answers, for the share_prefix=False case
    for qid in keys:
        scripts = scripts_for(cfg, qid)
        n_scripts += len(scripts)
        c = _query_calls(scripts)
        for role in without:
            without[role] += c["without"][role]
            with_[role] += c["with"][role]
        first += len(scripts)
    per_target = []
    sim_t = cfg.role_spec(SIMULATOR_ROLE).temperature if cfg.role_specs(SIMULATOR_ROLE) else 1.0
    for t in targets:
        # Greedy models on both sides make every conversation with the same prefix send the
        # same requests, so the cache shares them whatever the sample keys say.
        if cfg.scripts.share_prefix or (t.temperature == 0 and sim_t == 0):
            planned = dict(with_)
        else:
            planned = dict(without)
            if t.temperature == 0:
                planned["targets"] -= first - len(keys)
        planned["targets"] += len(keys)  # oracle
        per_target.append({"target": t.name, **planned})
    T = len(targets)
    roles = {role: {"without_sharing": T * (without[role] + (len(keys) if role == "targets" else 0)),
                    "with_sharing": T * (with_[role] + (len(keys) if role == "targets" else 0)),
                    "planned": sum(p[role] for p in per_target)}
             for role in ("targets", "user_simulator")}
    resamples = None
    if cfg.role_specs(CHECKER_ROLE):
        # One check per simulated user turn on first tries; each failing turn adds up to
        # max_resamples simulator calls and as many checks (an upper bound, not a forecast).
        roles[CHECKER_ROLE] = dict(roles["user_simulator"])
        resamples = {"max_resamples": cfg.move_check.max_resamples,
                     "extra_calls_upper_bound": 2 * cfg.move_check.max_resamples
                     * roles["user_simulator"]["planned"]}
    return {
        "n_queries": len(keys), "n_targets": T, "share_prefix": cfg.scripts.share_prefix,
        "conversations": T * (n_scripts + len(keys)),
        "roles": roles,
        "move_check_resamples": resamples,
        "saved_by_sharing": sum(r["without_sharing"] - r["with_sharing"] for r in roles.values()),
        "per_target_simulation": {"without_sharing": sum(without.values()),
                                  "with_sharing": sum(with_.values())},
        "per_target": per_target,
    }


# An oracle prompt restates the query with its benign intent: about a query's length more.
ORACLE_EXTRA = 1.0


def simulation_prompts(cfg, query_ids: list[str], query: float, answer: float, user: float,
                       user_base: float) -> dict[str, float]:
    """Mean prompt tokens per call of the targets and the simulated user over the prefix
    tree's calls (the first answer, one per move prefix, the oracle), and the mean history a
    judged response follows (what a judge that sees the history reads)."""
    turn = answer + user + 2 * MESSAGE_TOKENS
    t_sum = t_n = s_sum = s_n = 0.0
    for qid in query_ids:
        prefixes = {tuple(f.moves[:k]) for f in scripts_for(cfg, qid)
                    for k in range(1, f.n_moves + 1)}
        depths = [len(p) for p in prefixes]
        # the first answer (no history), one call per prefix, the oracle
        t_sum += query + sum(query + k * turn for k in depths) + query * (1 + ORACLE_EXTRA)
        t_n += 2 + len(depths)
        # the user writing move k has read the query, k answers and its k - 1 earlier moves
        s_sum += sum(user_base + query + k * answer + (k - 1) * user for k in depths)
        s_n += len(depths)
    mean_t = t_sum / t_n if t_n else query
    return {"targets": mean_t, "user_simulator": s_sum / s_n if s_n else user_base + query,
            "history": max(0.0, mean_t - query)}
