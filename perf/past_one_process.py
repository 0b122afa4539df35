"""Past one process: every figure of the scale-out issue, side by side in one run.

    .venv/bin/python perf/past_one_process.py [--calls 2000] [--concurrency 64]
        [--targets 2] [--queries 14] [--reps 2] [--rounds 4] [--skip-pipeline] [--skip-shards]
        [--json F]

Against the loopback test server (its own process) at 50 ms latency:

1. **Gateway**: ``--calls`` distinct tiny chat calls at concurrency 64 each way, ``--reps``
   times: a bare single-process ``litellm.acompletion`` loop, the gateway sending from the
   run's process (``workers: 0``), and the gateway with one worker process per core. Each
   repetition interleaves the three ways in ``--rounds`` rounds (the machine's speed drifts).
   CPU seconds per call of every process (this one, the workers, the test server) show where
   the CPU goes; on 2 cores their sum caps the rate at 2 ÷ (CPU per call).
2. **Pipeline**: the sample data (``--queries``, ``--targets`` targets, every length), run in
   this process under a long-lived Prefect server, cold, with workers and without; every
   request it sent is recorded (in the run's process, before it goes to a worker) and
   replayed through the bare litellm loop: pipeline calls/s over its LLM stages ÷ bare
   calls/s. Then a fresh ``carryon run`` of the same config in a new process (what a user
   runs): the same replay ÷ its LLM stages (the seconds per stage it prints), and ÷ its wall
   time less the fixed cost below (the report and the process's exit included).
3. **Reruns**: the warm rerun's flow time ÷ the cold flow's, in this process and as a user
   reruns (``carryon run`` again, a fresh process: its flow then also imports what the stages
   load lazily, the report's libraries among them). A rerun skips the model stages whose
   inputs are unchanged (tasks/engine/stage_memo.py); the in-process rerun is also timed with
   ``replay=True``, every stage replayed from the cache, beside it. The fixed cost a user pays before
   the first stage: imports (a fresh process), the temporary Prefect server's start, and with
   a long-lived server configured (``PREFECT_API_URL``) nothing but the imports.
4. **Two shards, one provider limit**: ``perf/shard_limits.py``: two shard processes
   against a server that answers 429 above 16 in flight (250 ms answers: see that script),
   with per-process limits and with the shared (Prefect) budget.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import os
import subprocess
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
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.pop("CARRYON_GATEWAY_WORKERS", None)  # the config says how many, per measurement

import yaml  # noqa: E402

from perf.gateway_throughput import bare_litellm, control, start_server  # noqa: E402
from perf.pipeline_throughput import bench_config, run_pipeline  # noqa: E402

LATENCY = 0.05
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


class CpuMeter:
    """CPU seconds spent by this process, the given worker pids and the server, over a block."""

    def __init__(self, server_pid: int, worker_pids=()):
        self.pids = {"this process": os.getpid(), "test server": server_pid,
                     **{f"worker {i}": p for i, p in enumerate(worker_pids)}}

    def __enter__(self):
        self.t0, self.c0 = time.perf_counter(), {k: cpu_s(p) for k, p in self.pids.items()}
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.cpu = {k: cpu_s(p) - self.c0[k] for k, p in self.pids.items()}


def _spec(api_base: str, conc: int):
    from tasks.config import ModelSpec

    return ModelSpec(name="bench", model="openai/bench", api_base=api_base, api_key_env=None,
                     temperature=0.0, top_p=None, max_tokens=32, seed=None, stop=None,
                     max_concurrency=conc, rpm=None, timeout_s=30, max_retries=3,
                     structured="json_schema", mode="chat", where="bench")


async def gateway_figures(tmp: Path, api_base: str, server_pid: int, n: int, conc: int,
                          reps: int, rounds: int = 4) -> dict:
    """Each repetition sends ``n`` calls each way, interleaved in ``rounds`` rounds (the order
    rotates every round): this shared machine's speed drifts by tens of percent within a
    minute, and one long block per way would set a fast minute against a slow one."""
    from tasks.config import GatewayConfig
    from tasks.gateway import Gateway
    from tasks.gateway.workers import worker_count

    spec, cores = _spec(api_base, conc), worker_count("auto")
    modes = ["bare litellm", "gateway, 0 workers", f"gateway, {cores} workers"]
    runs: dict[str, list[list[CpuMeter]]] = {m: [] for m in modes}  # per rep: one per round
    per = max(1, n // rounds)

    async def through(gw, tag, count):
        results = await asyncio.gather(*[
            gw.chat(spec, "bench", [{"role": "user", "content": f"{tag} {i}"}]) for i in range(count)])
        bad = [r.error for r in results if not r.ok]
        if bad:
            raise SystemExit(f"{len(bad)} gateway calls failed, e.g. {bad[0]}")

    for rep in range(reps):
        gateways = {}
        for workers, mode in ((0, modes[1]), (cores, modes[2])):
            gw = Gateway(tmp / f"gw-{rep}-{workers}", "bench", GatewayConfig(workers=workers))
            # Steady state: the workers' start, and litellm's lazy imports and connection
            # pools on their first calls, are not timed (the bare loop was warmed the same way).
            pool = await gw.start_workers()
            await through(gw, f"warmup-{rep}-{workers}", 64 * max(1, workers))
            gateways[mode] = (gw, pool)
        meters: dict[str, list[CpuMeter]] = {m: [] for m in modes}
        for rnd in range(rounds):
            for mode in modes[rnd % 3:] + modes[:rnd % 3]:
                tag = f"{mode}-{rep}-{rnd}"
                if mode == modes[0]:
                    with CpuMeter(server_pid) as m:
                        await bare_litellm(api_base, per, conc, tag)
                else:
                    gw, pool = gateways[mode]
                    with CpuMeter(server_pid, pool.pids() if pool else ()) as m:
                        await through(gw, tag, per)
                meters[mode].append(m)
        for gw, _ in gateways.values():
            gw.close()
        for mode in modes:
            runs[mode].append(meters[mode])
    out = {}
    calls = per * rounds
    for name, reps_meters in runs.items():
        flat = [m for rep_meters in reps_meters for m in rep_meters]
        keys = {k for m in flat for k in m.cpu}
        out[name] = {
            "calls_s": [round(calls / sum(m.wall for m in rm), 1) for rm in reps_meters],
            "cpu_ms_per_call": {k: round(1000 * sum(m.cpu.get(k, 0.0) for m in flat) / (calls * reps), 2)
                                for k in sorted(keys)},
        }
        out[name]["cpu_ms_per_call_total"] = round(sum(out[name]["cpu_ms_per_call"].values()), 2)
    bare = out[modes[0]]["calls_s"]
    for name in modes:
        out[name]["vs_bare"] = [round(r / b, 2) for r, b in zip(out[name]["calls_s"], bare)]
    # The same comparison in CPU, which the machine's drift moves far less than wall time:
    # what the cores allow with workers over what one core allows the bare loop.
    out["cpu_bound_vs_bare"] = round(
        (cores / out[modes[2]]["cpu_ms_per_call_total"]) / (1 / out[modes[0]]["cpu_ms_per_call"]["this process"]), 2)
    out["cores"], out["rounds"], out["calls_per_round"] = cores, rounds, per
    return out


class SendRecorder:
    """Records every request the gateway sends (in the run's process, before a worker takes
    it), so the bare loop can replay the very same calls."""

    def __init__(self):
        from tasks.gateway.client import Gateway

        self.cls, self.orig, self.calls = Gateway, Gateway._send, []
        rec = self

        async def recording(gw, kwargs, convo, prompt):
            rec.calls.append((dict(kwargs), None if convo is None else list(convo), prompt))
            return await rec.orig(gw, kwargs, convo, prompt)

        Gateway._send = recording

    def restore(self):
        self.cls._send = self.orig


async def bare_replay(calls: list, conc: int) -> float:
    from tasks.gateway.transport import _litellm

    litellm, sem = _litellm(), asyncio.Semaphore(conc)

    async def one(kwargs, convo, prompt):
        async with sem:
            if convo is not None:
                await litellm.acompletion(messages=convo, **kwargs)
            else:
                await litellm.atext_completion(prompt=prompt, **kwargs)

    t0 = time.perf_counter()
    await asyncio.gather(*[one(*c) for c in calls])
    return time.perf_counter() - t0


def _config(tmp: Path, name: str, api_base: str, args, workers) -> Path:
    cfg = bench_config(api_base, tmp / name, args.targets, args.concurrency, args.queries)
    cfg["gateway"]["workers"] = workers
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


LLM_STAGES = ("checklists", "episodes", "verdicts")


def fresh_process(cmd: list[str], env: dict | None = None) -> tuple[float, dict]:
    """Wall seconds of a fresh ``carryon run`` process, and the seconds per stage it printed
    (its ``stage seconds:`` line)."""
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, check=True, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True).stdout
    wall = time.perf_counter() - t0
    line = next((ln for ln in out.splitlines() if ln.startswith("stage seconds: ")), None)
    if line is None:
        raise SystemExit("carryon run printed no 'stage seconds:' line")
    return wall, json.loads(line.removeprefix("stage seconds: "))


def run_flow_seconds(home: Path) -> list[float]:
    """Each run's flow time in ``home``'s warehouse (finished - started), oldest first."""
    import duckdb

    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        rows = con.execute("SELECT epoch(finished) - epoch(started) FROM runs "
                           "WHERE status = 'succeeded' ORDER BY started").fetchall()
    finally:
        con.close()
    return [r[0] for r in rows]


def carryon_cli() -> list[str]:
    exe = Path(sys.executable).with_name("carryon")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "flows.cli"]


async def pipeline_figures(tmp: Path, base: str, api_base: str, args) -> dict:
    out = {}
    await bare_litellm(api_base, 64, args.concurrency, "warmup")
    for workers in ("auto", 0):
        path = _config(tmp, f"pipe-{workers}", api_base, args, workers)
        recorder = SendRecorder()
        try:
            cold = await run_pipeline(path, base)
        finally:
            recorder.restore()
        n = cold["requests_server"]
        if len(recorder.calls) != n:
            raise SystemExit(f"recorded {len(recorder.calls)} requests, the server saw {n}")
        bare_s = await bare_replay(recorder.calls, args.concurrency)
        row = {"requests": n, "failures": cold["failures"],
               "cold_flow_s": round(cold["wall_s"], 2),
               "stages_s": {k: round(v, 2) for k, v in cold["stages_s"].items()},
               "pipeline_calls_s_llm_stages": round(n / cold["llm_stages_s"], 1),
               "bare_replay_calls_s": round(n / bare_s, 1),
               "share_llm_stages": round(bare_s / cold["llm_stages_s"], 3),
               "share_full_flow": round(bare_s / cold["wall_s"], 3)}
        if workers == "auto":
            # The rerun as it runs by default (unchanged model stages skipped), then with
            # --replay (every stage replayed from the cache), as before the stage memos.
            warm = await run_pipeline(path, base)
            row |= {"warm_flow_s": round(warm["wall_s"], 2),
                    "warm_requests": warm["requests_server"],
                    "warm_vs_cold": round(warm["wall_s"] / cold["wall_s"], 4),
                    "warm_stages_s": {k: round(v, 2) for k, v in warm["stages_s"].items()},
                    "warm_skipped": sorted(s for s, v in warm["summary"]["stages"].items()
                                           if isinstance(v, dict) and v.get("unchanged_since"))}
            replayed = await run_pipeline(path, base, replay=True)
            row |= {"replay_flow_s": round(replayed["wall_s"], 2),
                    "replay_requests": replayed["requests_server"],
                    "replay_vs_cold": round(replayed["wall_s"] / cold["wall_s"], 4),
                    "replay_stages_s": {k: round(v, 2) for k, v in replayed["stages_s"].items()}}
            # The same config as a user runs it: a fresh `carryon run` process, cold.
            fresh = _config(tmp, "pipe-fresh", api_base, args, "auto")
            control(base, "/_reset", {})
            cli_s, cli_stages = fresh_process(carryon_cli() + ["run", "--config", str(fresh)])
            cli_llm = sum(cli_stages.get(s, 0.0) for s in LLM_STAGES)
            row |= {"fresh_cli_s": round(cli_s, 2),
                    "fresh_cli_requests": control(base, "/_stats").get("total", 0),
                    "fresh_cli_stages_s": cli_stages,
                    "fresh_share_llm_stages": round(bare_s / cli_llm, 3),
                    "bare_replay_s": round(bare_s, 2)}
            # A user's rerun: the same command again, a fresh process on a full cache. Its
            # flow time is its runs row's (open_run to finish_run, after the imports and the
            # temporary server), the cold one's likewise.
            control(base, "/_reset", {})
            warm_cli_s, _ = fresh_process(carryon_cli() + ["run", "--config", str(fresh)])
            cold_flow, warm_flow = run_flow_seconds(tmp / "pipe-fresh")
            row |= {"fresh_warm_cli_s": round(warm_cli_s, 2),
                    "fresh_warm_requests": control(base, "/_stats").get("total", 0),
                    "fresh_cold_flow_s": round(cold_flow, 2),
                    "fresh_warm_flow_s": round(warm_flow, 2),
                    "fresh_warm_vs_cold": round(warm_flow / cold_flow, 4),
                    # What each process spent outside its flow, as it really ran: imports,
                    # the temporary server, the workers' start, the report's libraries' exit.
                    "fresh_cold_outside_flow_s": round(cli_s - cold_flow, 2),
                    "fresh_warm_outside_flow_s": round(warm_cli_s - warm_flow, 2)}
        out[f"workers={workers}"] = row
    return out


def fixed_cost_figures() -> dict:
    """What a user pays before the first stage, each in a fresh process: the imports; the
    temporary Prefect server alone; and both as ``carryon run`` does them (the server starts
    while the flow is imported). A long-lived server (PREFECT_API_URL) leaves the imports."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}

    def timed(code: str) -> float:
        r = subprocess.run([sys.executable, "-c", "import time; t0 = time.perf_counter()\n" + code
                            + "\nprint(time.perf_counter() - t0)"], cwd=ROOT, env=env,
                           capture_output=True, text=True, check=True)
        return float(r.stdout.strip().splitlines()[-1])

    boot = "from tasks.ops.ephemeral import start_temporary_server; s = start_temporary_server()"
    # Three fresh processes each: one sample of a 3-second import swings by half a second on
    # this shared machine. The median is the figure; every sample is kept.
    imports = sorted(timed("import flows.cli, flows.carryon") for _ in range(3))
    server = timed(boot + "; s.wait_ready()")
    both = sorted(timed(boot + "; import flows.cli, flows.carryon; s.wait_ready()")
                  for _ in range(3))
    return {"imports_s": round(imports[1], 2), "imports_samples_s": [round(x, 2) for x in imports],
            "temporary_server_s": round(server, 2),
            "before_first_stage_temporary_s": round(both[1], 2),
            "before_first_stage_temporary_samples_s": [round(x, 2) for x in both],
            "before_first_stage_long_lived_s": round(imports[1], 2),
            "bytecode_cache": os.environ.get("PYTHONDONTWRITEBYTECODE") != "1"}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--targets", type=int, default=2)
    ap.add_argument("--queries", type=int, default=14)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--skip-pipeline", action="store_true")
    ap.add_argument("--skip-shards", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out: dict = {"latency_ms": LATENCY * 1000, "concurrency": args.concurrency}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        proc, base = start_server(tmp)
        api_base = base + "/v1"
        try:
            control(base, "/_config", {"latency_s": LATENCY})
            await bare_litellm(api_base, 64, args.concurrency, "warmup")
            out["gateway"] = await gateway_figures(tmp, api_base, proc.pid, args.calls,
                                                   args.concurrency, args.reps, args.rounds)
            print_gateway(out, args.calls)
            if not args.skip_pipeline:
                from prefect.testing.utilities import prefect_test_harness

                with prefect_test_harness(server_startup_timeout=120):
                    out["pipeline"] = await pipeline_figures(tmp, base, api_base, args)
                print_pipeline(out, args)
        finally:
            proc.terminate()
            proc.wait(5)
    out["fixed_cost"] = fixed_cost_figures()
    print_fixed(out)
    if not args.skip_shards:
        from perf.shard_limits import measure

        out["shards"] = measure(shards=2, calls=200, limit=16, latency_s=0.25)
        print_shards(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


def print_gateway(out: dict, n: int) -> None:
    g = out["gateway"]
    print(f"\n## Gateway: {n} calls, {out['latency_ms']:.0f} ms, concurrency {out['concurrency']}, "
          f"{g['cores']} cores\n")
    print("| | calls/s (each rep) | ÷ bare litellm | CPU ms per call: this process | workers | test server | all |")
    print("|---|---|---|---|---|---|---|")
    for name, r in g.items():
        if not isinstance(r, dict):
            continue
        cpu = r["cpu_ms_per_call"]
        workers = sum(v for k, v in cpu.items() if k.startswith("worker"))
        print(f"| {name} | {', '.join(map(str, r['calls_s']))} | "
              f"{', '.join(f'{x:.2f}' for x in r['vs_bare'])} | {cpu['this process']} | "
              f"{workers:.2f} | {cpu['test server']} | {r['cpu_ms_per_call_total']} |")
    best = g[f"gateway, {g['cores']} workers"]["cpu_ms_per_call_total"]
    print(f"\nCPU ceiling with workers: {g['cores']} cores ÷ {best} ms a call = "
          f"{1000 * g['cores'] / best:.0f} calls/s (the test server's share included); over one "
          f"core's worth of the bare loop's CPU per call: {g['cpu_bound_vs_bare']}×. Each rate: "
          f"{g['rounds']} interleaved rounds of {g['calls_per_round']} calls per way.")


def print_pipeline(out: dict, args) -> None:
    print(f"\n## Pipeline: sample data, {args.targets} targets × {args.queries} queries, every "
          f"length, {out['latency_ms']:.0f} ms\n")
    print("| | requests | bare replay calls/s | pipeline calls/s (LLM stages) | ÷ bare (LLM stages) | ÷ bare (full flow) | stages s |")
    print("|---|---|---|---|---|---|---|")
    for name, r in out["pipeline"].items():
        print(f"| {name} | {r['requests']} | {r['bare_replay_calls_s']} | "
              f"{r['pipeline_calls_s_llm_stages']} | {r['share_llm_stages']:.0%} | "
              f"{r['share_full_flow']:.0%} | {r['stages_s']} |")
    r = out["pipeline"]["workers=auto"]
    print(f"\nwarm rerun: {r['warm_flow_s']} s = {r['warm_vs_cold']:.1%} of the cold flow "
          f"({r['cold_flow_s']} s), {r['warm_requests']} requests; skipped as unchanged: "
          f"{r['warm_skipped']}; stages run {r['warm_stages_s']}")
    print(f"warm rerun with --replay (every stage replayed from the cache): {r['replay_flow_s']} s "
          f"= {r['replay_vs_cold']:.1%} of the cold flow, {r['replay_requests']} requests; "
          f"stages {r['replay_stages_s']}")
    print(f"fresh `carryon run` process, cold: {r['fresh_cli_s']} s wall for "
          f"{r['fresh_cli_requests']} requests (bare replay of the same calls: {r['bare_replay_s']} s); "
          f"stages {r['fresh_cli_stages_s']}; ÷ bare (LLM stages) {r['fresh_share_llm_stages']:.0%}")
    print(f"fresh `carryon run` process, warm (a user's rerun): {r['fresh_warm_cli_s']} s wall, "
          f"{r['fresh_warm_requests']} requests; flow {r['fresh_warm_flow_s']} s = "
          f"{r['fresh_warm_vs_cold']:.1%} of that process's cold flow ({r['fresh_cold_flow_s']} s)")
    print(f"each fresh process outside its flow (imports, temporary server, workers' start, "
          f"exit): cold {r['fresh_cold_outside_flow_s']} s, warm {r['fresh_warm_outside_flow_s']} s")


def print_fixed(out: dict) -> None:
    f = out["fixed_cost"]
    print(f"\n## Fixed cost before the first stage\n\nimports {f['imports_s']} s, median of "
          f"{f['imports_samples_s']} "
          f"(bytecode cache {'on' if f['bytecode_cache'] else 'off: PYTHONDONTWRITEBYTECODE=1'}); "
          f"temporary Prefect server alone {f['temporary_server_s']} s; both as `carryon run` "
          f"does them (the server starts during the imports) {f['before_first_stage_temporary_s']} s, "
          f"median of {f['before_first_stage_temporary_samples_s']}; "
          f"with a long-lived server (PREFECT_API_URL) {f['before_first_stage_long_lived_s']} s")
    if "pipeline" in out:
        r = out["pipeline"]["workers=auto"]
        flow = r["fresh_cli_s"] - f["before_first_stage_temporary_s"]
        print(f"fresh `carryon run` less that fixed cost: {flow:.1f} s (the report and the "
              f"process's exit included); the same calls through bare litellm "
              f"{r['bare_replay_s']} s = {r['bare_replay_s'] / flow:.0%}; over its LLM stages "
              f"alone {r['fresh_share_llm_stages']:.0%}")


def print_shards(out: dict) -> None:
    from perf.shard_limits import print_table

    print("\n## Two shards, one provider limit\n")
    print_table(out["shards"])


if __name__ == "__main__":
    asyncio.run(main())
