"""The full pipeline (checklists → episodes → verdicts → report) against the loopback test server.

    .venv/bin/python perf/pipeline_throughput.py [--targets 6] [--concurrency 64]
                                                       [--queries 14] [--skip-0ms]

What it measures, in ONE process and ONE run, so the ratios compare like with like:

1. Prefect start-up: a temporary Prefect server (``prefect_test_harness``) is started before
   any timing; its cost is reported on its own line and is NOT in any pipeline figure.
2. Cold pipeline at 0 ms server latency (fresh home and cache). Every request the gateway
   sends is recorded (its litellm keyword arguments), then replayed through a bare
   ``litellm.acompletion`` loop under the same concurrency: the SAME calls (messages,
   response formats, parameters), without cache, retries, parsing, warehouse or Prefect.
   Pipeline calls/s ÷ bare calls/s; target >= 70 %. The simple loop of
   ``perf/gateway_throughput.py`` (tiny prompts, same count) is shown beside it.
3. Cold pipeline at 50 ms (another fresh home), the same replay at 50 ms: pipeline calls/s
   as a share of the ideal min(concurrency ÷ latency, bare litellm rate) (DESIGN §3).
   Target >= 85 %. CPU seconds of this process per call are printed for the pipeline and
   the replay, to tell CPU cost from waiting.
4. Warm rerun of the 50 ms run (same config, same home): the server must see zero requests
   and the wall time must be <= 5 % of the cold run.

A pipeline figure is the wall time of ``await carryon(config=...)`` called in-process: it
includes open_run (pre-flight, warehouse init, the run row), the four stage subflows with their
Prefect task runs (API calls to the already-running temporary server), every gateway call,
every warehouse write, and the report stage (views, analyses, figures, HTML). It excludes
Python and library imports (done before), the Prefect server start, and the test server.
Per-stage wall times are printed too; the LLM-stage figure (checklists + episodes + verdicts)
is the one the throughput targets apply to, the full-flow figure is shown beside it.

How "concurrency 64" maps onto the gateway: its limits are per (model string, api_base), so
every role (targets, simulator, judges, checklist roles) uses ONE model string
``openai/bench`` on one api_base with ``max_concurrency: 64``: at most 64 requests are in
flight at any moment, whatever the mix of roles, which is what the ideal's "concurrency"
means. The targets (and ensemble members) are told apart by their names and by slightly
different temperatures: the test server's answer depends on (messages, model, temperature),
so distinct temperatures give distinct answers (and so distinct judge requests), exactly as
distinct real models would; sampled calls carry per-target sample keys (DESIGN "Sample keys").

The test server runs in its own process (its CPU does not share our interpreter).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Prefect's per-task-run console logging is not part of what we measure; keep it quiet.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

import yaml  # noqa: E402

from perf.gateway_throughput import bare_litellm, control, start_server  # noqa: E402

MODEL = "openai/bench"


def bench_config(api_base: str, home: Path, n_targets: int, concurrency: int,
                 queries: int) -> dict:
    """Every role on one model string (one shared limit of ``concurrency`` in flight)."""
    return {
        "home": str(home),
        "seed": 0,
        "dataset": {"source": "sample", "limit": queries},
        # The paper's sampling: lengths 4..12, two BC flows and one NC flow per length.
        "flows": {"lengths": [4, 6, 8, 10, 12], "bc_per_length": 2, "nc_per_length": 1},
        "models": {
            "defaults": {"model": MODEL, "api_base": api_base, "temperature": 0.0,
                         "max_tokens": 256, "max_concurrency": concurrency, "timeout_s": 60,
                         "max_retries": 3},
            "targets": [{"name": f"target-{i + 1}", "temperature": round(0.5 + 0.01 * i, 2)}
                        for i in range(n_targets)],
            "user_simulator": {"name": "sim", "temperature": 1.0},
            "intent_rewriter": {"name": "helper"},
            "ensemble": [{"name": f"ens-{i + 1}", "temperature": round(0.3 + 0.01 * i, 2)}
                         for i in range(3)],
            "wildguard": {"name": "guard", "mode": "chat"},
            "decomposer": {"name": "helper"},
            "merger": {"name": "helper"},
            "misuse_filter": {"name": "helper"},
            "benutil_judge": {"name": "judge"},
            "safety_judge": {"name": "judge"},
        },
        "gateway": {"backoff_base_s": 0.05, "backoff_max_s": 1.0},
    }


class CallRecorder:
    """Records the keyword arguments of every ``litellm.acompletion`` the gateway sends during
    a run (a dict copy and a list append per call), so the bare loop can replay exactly the
    same requests: same messages, response formats, headers and parameters."""

    def __init__(self):
        from tasks.gateway.client import _litellm

        self.litellm = _litellm()
        self.orig = self.litellm.acompletion
        self.calls: list[dict] = []

        async def recording(**kwargs):
            self.calls.append(dict(kwargs))
            return await self.orig(**kwargs)

        self.litellm.acompletion = recording

    def restore(self):
        self.litellm.acompletion = self.orig


async def bare_replay(calls: list[dict], conc: int) -> tuple[float, float]:
    """The recorded requests through plain ``litellm.acompletion`` under one semaphore: no
    cache, no retries, no parsing, no warehouse, no Prefect. Returns (wall s, CPU s)."""
    from tasks.gateway.client import _litellm

    litellm = _litellm()
    sem = asyncio.Semaphore(conc)

    async def one(kw):
        async with sem:
            await litellm.acompletion(**kw)

    c0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*[one(kw) for kw in calls])
    return time.perf_counter() - t0, time.process_time() - c0


class StageTimer:
    """Wraps flows.carryon.STAGE_FLOWS so each stage's wall time is recorded (the flow calls
    the stage through that dict; nothing else changes)."""

    def __init__(self):
        import flows.carryon as fc

        self.fc, self.orig, self.times = fc, dict(fc.STAGE_FLOWS), {}
        for name, fn in self.orig.items():
            fc.STAGE_FLOWS[name] = self._wrap(name, fn)

    def _wrap(self, name, fn):
        async def timed(run_id):
            t0 = time.perf_counter()
            try:
                return await fn(run_id)
            finally:
                self.times[name] = time.perf_counter() - t0
        return timed

    def restore(self):
        self.fc.STAGE_FLOWS.update(self.orig)


async def run_pipeline(config_path: Path, base: str, recorder: CallRecorder | None = None,
                       replay: bool = False) -> dict:
    """One in-process flow run; returns wall and CPU times, server request count, summary.
    ``replay``: run every stage, also those a rerun would skip as unchanged."""
    from flows.carryon import carryon

    control(base, "/_reset", {})
    timer = StageTimer()
    stderr = io.StringIO()  # the stages' progress lines: kept out of the figures' output
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        with contextlib.redirect_stderr(stderr):
            summary = await carryon(config=str(config_path), replay=replay)
    finally:
        timer.restore()
        if recorder is not None:
            recorder.restore()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    served = control(base, "/_stats").get("total", 0)
    llm = sum(timer.times.get(s, 0.0) for s in ("checklists", "episodes", "verdicts"))
    return {"wall_s": wall, "cpu_s": cpu, "llm_stages_s": llm, "stages_s": dict(timer.times),
            "requests_server": served, "requests_gateway": summary["requests"],
            "cache_hits": summary["cache_hits"], "failures": summary["failures"],
            "summary": summary}


def calls_by_role(home: Path, run_id: str) -> dict:
    from warehouse import Warehouse

    rows = Warehouse(home / "warehouse.duckdb").query(
        "SELECT role, count(*) AS n, sum(CASE WHEN cache_hit THEN 0 ELSE 1 END) AS sent "
        "FROM llm_calls WHERE run_id = ? GROUP BY role ORDER BY role", [run_id])
    return {r["role"]: {"calls": r["n"], "sent": int(r["sent"])} for r in rows}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=6)
    ap.add_argument("--queries", type=int, default=14, help="sample queries (the sample has 14)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--skip-0ms", action="store_true", help="only the 50 ms run and its rerun")
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    conc = args.concurrency

    t0 = time.perf_counter()
    import flows.carryon  # noqa: F401  (Prefect, the stages, pydantic models)
    from tasks.gateway.client import _litellm

    _litellm()
    imports_s = time.perf_counter() - t0
    from prefect.testing.utilities import prefect_test_harness

    out: dict = {"imports_s": round(imports_s, 2), "concurrency": conc,
                 "targets": args.targets, "queries": args.queries}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        proc, base = start_server(tmp)
        api_base = base + "/v1"
        try:
            t0 = time.perf_counter()
            with prefect_test_harness(server_startup_timeout=120):
                out["prefect_start_s"] = round(time.perf_counter() - t0, 2)
                await bare_litellm(api_base, 64, conc, "warmup")  # connection pools, lazy imports
                latencies = ([] if args.skip_0ms else [0.0]) + [0.05]
                for latency in latencies:
                    control(base, "/_config", {"latency_s": latency})
                    home = tmp / f"home-{int(latency * 1000)}ms"
                    cfg_path = tmp / f"bench-{int(latency * 1000)}ms.yaml"
                    cfg_path.write_text(yaml.safe_dump(bench_config(api_base, home, args.targets,
                                                                    conc, args.queries)))
                    recorder = CallRecorder()
                    cold = await run_pipeline(cfg_path, base, recorder)
                    n = cold["requests_server"]
                    if len(recorder.calls) != n:
                        raise SystemExit(f"recorded {len(recorder.calls)} calls, server saw {n}")
                    # The reference: the very same requests, replayed through bare litellm.
                    bare_s, bare_cpu = await bare_replay(recorder.calls, conc)
                    del recorder
                    # For comparison, the simple loop of gateway_throughput.py (tiny prompts).
                    simple_s = await bare_litellm(api_base, n, conc, f"bare{latency}")
                    bare_rate = n / bare_s
                    ideal = conc / latency if latency else float("inf")
                    reference = min(ideal, bare_rate)
                    row = {
                        "latency_ms": latency * 1000, "requests": n,
                        "gateway_calls": cold["requests_gateway"] + cold["cache_hits"],
                        "in_run_cache_hits": cold["cache_hits"], "failures": cold["failures"],
                        "by_role": calls_by_role(home, cold["summary"]["run_id"]),
                        "cold_wall_s": round(cold["wall_s"], 2),
                        "cold_llm_stages_s": round(cold["llm_stages_s"], 2),
                        "stages_s": {k: round(v, 2) for k, v in cold["stages_s"].items()},
                        "cold_cpu_ms_per_call": round(1000 * cold["cpu_s"] / n, 2),
                        "bare_litellm_s": round(bare_s, 2),
                        "bare_cpu_ms_per_call": round(1000 * bare_cpu / n, 2),
                        "bare_simple_loop_calls_s": round(n / simple_s, 1),
                        "bare_litellm_calls_s": round(bare_rate, 1),
                        "ideal_calls_s": None if latency == 0 else round(ideal, 1),
                        "pipeline_calls_s_llm_stages": round(n / cold["llm_stages_s"], 1),
                        "pipeline_calls_s_full_flow": round(n / cold["wall_s"], 1),
                        "share_llm_stages": round(n / cold["llm_stages_s"] / reference, 3),
                        "share_full_flow": round(n / cold["wall_s"] / reference, 3),
                    }
                    if latency:
                        warm = await run_pipeline(cfg_path, base)
                        row |= {"warm_wall_s": round(warm["wall_s"], 2),
                                "warm_stages_s": {k: round(v, 2) for k, v in warm["stages_s"].items()},
                                "warm_requests_server": warm["requests_server"],
                                "warm_vs_cold": round(warm["wall_s"] / cold["wall_s"], 4)}
                    print(json.dumps(row), flush=True)
                    out[f"{int(latency * 1000)}ms"] = row
        finally:
            proc.terminate()
            proc.wait(5)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    print_table(out)


def print_table(out: dict) -> None:
    print(f"\nPrefect temporary server start (excluded from every figure): {out['prefect_start_s']} s; "
          f"imports (excluded): {out['imports_s']} s")
    print(f"{out['targets']} targets x {out['queries']} sample queries, concurrency {out['concurrency']} "
          "(one model string for all roles)\n")
    print("| latency | requests | bare litellm calls/s (same calls replayed) | ideal calls/s | pipeline calls/s (LLM stages) "
          "| share (LLM stages) | share (full flow incl. report) | target |")
    print("|---|---|---|---|---|---|---|---|")
    for key, target in (("0ms", "≥ 70 % of bare litellm"), ("50ms", "≥ 85 % of min(ideal, bare)")):
        r = out.get(key)
        if not r:
            continue
        print(f"| {r['latency_ms']:.0f} ms | {r['requests']} | {r['bare_litellm_calls_s']} | "
              f"{r['ideal_calls_s'] or '∞'} | {r['pipeline_calls_s_llm_stages']} | "
              f"{r['share_llm_stages']:.0%} | {r['share_full_flow']:.0%} | {target} |")
    for key in ("0ms", "50ms"):
        r = out.get(key)
        if r:
            print(f"{key}: CPU of this process per call: pipeline {r['cold_cpu_ms_per_call']} ms, "
                  f"bare replay {r['bare_cpu_ms_per_call']} ms; simple bare loop "
                  f"{r['bare_simple_loop_calls_s']} calls/s; stages {r['stages_s']}")
    r = out.get("50ms")
    if r and "warm_wall_s" in r:
        print(f"\nwarm rerun at 50 ms: {r['warm_wall_s']} s vs cold {r['cold_wall_s']} s "
              f"= {r['warm_vs_cold']:.1%} (target ≤ 5 %), requests to the server: "
              f"{r['warm_requests_server']} (target 0); stages {r['warm_stages_s']}")


if __name__ == "__main__":
    asyncio.run(main())
