"""Two shards against one provider: per-process limits vs one budget shared through Prefect.

    .venv/bin/python perf/shard_limits.py [--shards 2] [--calls 200] [--limit 16]
                                                [--latency 0.25] [--json FILE]

The loopback server (tests/support/llm_server.py, in a thread) answers at most ``--limit``
requests at once and 429s the rest (retry-after 50 ms). Each shard (tests/support/shard_worker.py,
its own process) runs ``--calls`` distinct calls with max_concurrency = limit: first with
local limits only (each shard allows the full limit, so together they ask for shards x limit),
then with tasks.gateway.shared_limits.SharedLimits (one budget on the Prefect server).
A temporary Prefect server is started unless PREFECT_API_URL is set.

Why 250 ms answers: a shard keeps its limit in flight only if it can start limit ÷ latency
calls a second (Little's law). At 50 ms that is 320 calls/s per shard for 16, more than one
process manages on this 2-core machine, so both shards would stay under the server's limit
with or without sharing and the test would show nothing; at 250 ms it is 64 calls/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

from tests.support.llm_server import Faults, LLMServer  # noqa: E402
from tests.support.shard_worker import run_shards  # noqa: E402


def measure(shards: int = 2, calls: int = 200, limit: int = 16, latency_s: float = 0.25,
            max_retries: int = 20) -> dict:
    """Run both modes; {"local": figures, "shared": figures, "config": ...}."""
    from tasks.ops.ephemeral import start_temporary_server

    prefect = start_temporary_server()
    if prefect is not None:
        prefect.wait_ready()
    out = {"config": {"shards": shards, "calls_per_shard": calls, "server_limit": limit,
                      "max_concurrency": limit, "latency_s": latency_s,
                      "max_retries": max_retries}}
    # The loopback server runs in a thread of this process, which only waits meanwhile.
    server = LLMServer(latency_s=latency_s, record=False,
                       faults=Faults(max_inflight=limit, retry_after_s=0.05)).start()
    try:
        runs = run_shards(server.api_base, modes=("local", "shared"), shards=shards, calls=calls,
                          max_concurrency=limit, max_retries=max_retries, reset=server.reset,
                          counts=lambda: {**server.counts, "max_inflight": server.max_inflight})
        for mode, run in runs.items():
            c = run["server"]
            total, rejected = c.get("total", 0), c.get("fault_429_limit", 0)
            out[mode] = {
                "requests": total, "rejected_429": rejected,
                "rejected_pct": round(100 * rejected / total, 1) if total else 0.0,
                "failed_after_retries": sum(s["failed"] for s in run["shards"]),
                "ok": sum(s["ok"] for s in run["shards"]),
                "wall_s": run["wall_s"], "server_max_inflight": c["max_inflight"],
                "shard_wall_s": [s["wall_s"] for s in run["shards"]],
            }
        out["shared"]["blocks_acquired"] = sum(
            s["shared_stats"]["blocks_acquired"] for s in runs["shared"]["shards"])
        out["shared"]["prefect_calls"] = sum(
            s["shared_stats"]["server_calls"] for s in runs["shared"]["shards"])
    finally:
        server.stop()
        if prefect is not None:
            prefect.stop()
    return out


ROWS = [("requests the server received", "requests"), ("answered 429", "rejected_429"),
        ("rejected share (%)", "rejected_pct"), ("failed after retries", "failed_after_retries"),
        ("calls answered", "ok"), ("wall time (s)", "wall_s"),
        ("server max in flight", "server_max_inflight")]


def print_table(fig: dict) -> None:
    cfg = fig["config"]
    print(f"{cfg['shards']} shards x {cfg['calls_per_shard']} calls, max_concurrency "
          f"{cfg['max_concurrency']} each, server answers {cfg['server_limit']} at once, "
          f"latency {cfg['latency_s'] * 1000:.0f} ms\n")
    print("| | local limits | shared limits |")
    print("|---|---|---|")
    for label, key in ROWS:
        print(f"| {label} | {fig['local'][key]} | {fig['shared'][key]} |")
    print(f"\nshared: {fig['shared']['blocks_acquired']} blocks leased, "
          f"{fig['shared']['prefect_calls']} Prefect API calls")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--calls", type=int, default=200, help="calls per shard")
    ap.add_argument("--limit", type=int, default=16, help="in flight at the server = max_concurrency")
    ap.add_argument("--latency", type=float, default=0.25)
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    fig = measure(args.shards, args.calls, args.limit, args.latency)
    print_table(fig)
    if args.json:
        args.json.write_text(json.dumps(fig, indent=2))


if __name__ == "__main__":
    main()
