"""One shard of a benchmark run, as its own process: N distinct chat calls through a Gateway.

    python -m tests.support.shard_worker --api-base URL --calls 150 --max-concurrency 8 --shared|--local
                                 [--modes local,shared: both in turn]

``--local``: only the gateway's own per-process limit applies (``shared_limits: off``).
``--shared``: the gateway also holds a slot of the model's budget on the Prefect server at
PREFECT_API_URL for every request (``shared_limits: on``, tasks/gateway/shared_limits.py).
The gateway's worker processes follow CARRYON_GATEWAY_WORKERS (the tests set 0).

Per mode the worker warms up (imports, one call, the shared limits' setup), prints ``ready``,
waits for a line on stdin, runs, and prints one JSON line of results; before the next mode's
warm-up it waits for another line, sent once every shard's results are in. ``run_shards`` starts
several at once and starts each run in all of them together, so they overlap: the test (tests/gateway/test_shared_limits.py) and perf/shard_limits.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _spec(api_base: str, max_concurrency: int, max_retries: int):
    from tests.support.factories import model_spec  # this file runs from the repository root

    return model_spec("bench", api_base, max_tokens=32, max_concurrency=max_concurrency,
                      timeout_s=30, max_retries=max_retries, where="bench")


async def _phase(args, shared_mode: bool) -> dict:
    from tasks.config import GatewayConfig
    from tasks.gateway import Gateway

    spec = _spec(args.api_base, args.max_concurrency, args.max_retries)
    mode = "shared" if shared_mode else "local"
    with tempfile.TemporaryDirectory() as cache:  # fresh: no call is a cache hit
        gw = Gateway(Path(cache), f"shard-{args.tag}-{mode}",
                     GatewayConfig(backoff_base_s=0.01, backoff_max_s=0.2,
                                   shared_limits="on" if shared_mode else "off"))

        async def call(text: str):
            return await gw.chat(spec, "bench", [{"role": "user", "content": text}])

        await call(f"{args.tag} {mode} warm-up")
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        t0 = time.perf_counter()
        results = await asyncio.gather(*[call(f"{args.tag} {mode} call {i}")
                                         for i in range(args.calls)])
        wall = time.perf_counter() - t0
        out = {"tag": args.tag, "mode": mode, "calls": len(results),
               "ok": sum(r.ok for r in results), "failed": sum(not r.ok for r in results),
               "failed_kinds": dict(Counter(r.error_kind for r in results if not r.ok)),
               "attempts": sum(r.attempts for r in results), "wall_s": round(wall, 3)}
        shared = next((lim.shared for lim in gw._limits.values() if lim.shared), None)
        if shared is not None:
            out["shared_stats"] = dict(shared.stats)
        elif shared_mode:
            raise SystemExit("shared mode, but the gateway applied no shared limits")
        await gw.release_limits()
        gw.close()
    return out


async def _shard(args) -> None:
    for i, mode in enumerate(args.modes.split(",")):
        if i:  # the next mode's warm-up waits until every shard has finished this one: a
            # warm-up call sent while another shard still runs would be a request outside
            # the run being measured (and outside the shared budget), seen as over the limit
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        out = await _phase(args, {"shared": True, "local": False}[mode])
        print(json.dumps(out), flush=True)


def _read_line(p: subprocess.Popen, what: str) -> str:
    line = "-"
    while line:
        line = p.stdout.readline()
        if line.strip() == "ready" or line.startswith("{"):  # skip what a library printed
            return line
    raise RuntimeError(f"a shard exited (code {p.wait(30)}) before {what}")


def run_shards(api_base: str, *, modes: tuple[str, ...] = ("local", "shared"), shards: int = 2,
               calls: int = 150, max_concurrency: int = 8, max_retries: int = 20,
               reset=None, counts=None, env: dict | None = None) -> dict:
    """Start ``shards`` workers that run each mode in turn. Per mode: wait until every shard
    is warm, call ``reset()`` (the server's counters forget the warm-up), start them together,
    collect their results, then ``counts()`` (the server's figures). One process per shard
    for all modes, so start-up (imports) is paid once."""
    cmd = [sys.executable, "-m", "tests.support.shard_worker", "--api-base", api_base,
           "--calls", str(calls), "--max-concurrency", str(max_concurrency),
           "--max-retries", str(max_retries), "--modes", ",".join(modes)]
    env = {**os.environ, **(env or {})}
    procs = [subprocess.Popen(cmd + ["--tag", f"shard{i}"], cwd=ROOT, env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
             for i in range(shards)]
    figures = {}
    try:
        for n, mode in enumerate(modes):
            for p in procs:
                _read_line(p, f"the {mode} run was ready")
            if reset is not None:
                reset()
            t0 = time.perf_counter()
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            outs = [json.loads(_read_line(p, f"the {mode} results")) for p in procs]
            figures[mode] = {"shards": outs, "wall_s": round(time.perf_counter() - t0, 3),
                             "server": counts() if counts is not None else None}
            for p in procs if n + 1 < len(modes) else ():
                p.stdin.write("next\n")  # every shard is done and counted: next mode's warm-up
                p.stdin.flush()
        for p in procs:
            p.stdin.close()
            if p.wait(60):
                raise RuntimeError(f"a shard exited {p.returncode}")
        return figures
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--api-base", required=True)
    ap.add_argument("--calls", type=int, default=150)
    ap.add_argument("--max-concurrency", type=int, default=8)
    ap.add_argument("--max-retries", type=int, default=20)
    ap.add_argument("--tag", default="shard")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--shared", dest="modes", action="store_const", const="shared")
    mode.add_argument("--local", dest="modes", action="store_const", const="local")
    mode.add_argument("--modes", help="several runs in turn, e.g. local,shared")
    asyncio.run(_shard(ap.parse_args()))


if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    main()
