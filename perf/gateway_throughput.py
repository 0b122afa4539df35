"""Gateway throughput against the loopback test server, side by side with a bare litellm loop.

    .venv/bin/python perf/gateway_throughput.py [--calls 1500] [--concurrency 64]

For each server latency (0 ms and 50 ms) it measures, in the same run:
- a bare ``litellm.acompletion`` loop (semaphore-bounded, no cache, no retries logic);
- the gateway, cold (every call a cache miss, so a real request);
- the gateway, warm (the same calls again: all cache hits, zero requests).
It prints calls/s, the ideal (concurrency ÷ latency), and the ratios the issues set targets
on: at 50 ms the gateway should reach >= 90 % of min(ideal, bare litellm rate).
The server runs in its own process so its CPU does not share our interpreter.
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
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tasks.config import ModelSpec  # noqa: E402
from tasks.gateway import Gateway  # noqa: E402
from tasks.gateway.client import _litellm  # noqa: E402


def start_server(tmp: Path) -> tuple[subprocess.Popen, str]:
    port_file = tmp / "port"
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.llm_server", "--port", "0",
                             "--port-file", str(port_file)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):  # a minute: a loaded 2-core machine imports slowly
        if port_file.exists() and port_file.read_text():
            return proc, f"http://127.0.0.1:{port_file.read_text()}"
        time.sleep(0.05)
    raise RuntimeError("test server did not start")


def control(base: str, path: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(base + path, data=json.dumps(body or {}).encode() if body is not None else None,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


async def bare_litellm(api_base: str, n: int, conc: int, tag: str) -> float:
    litellm = _litellm()
    sem = asyncio.Semaphore(conc)

    async def one(i):
        async with sem:
            await litellm.acompletion(model="openai/bench", api_base=api_base, api_key="none",
                                      messages=[{"role": "user", "content": f"{tag} bare {i}"}],
                                      temperature=0.0, max_tokens=32, max_retries=0)

    t0 = time.perf_counter()
    await asyncio.gather(*[one(i) for i in range(n)])
    return time.perf_counter() - t0


async def via_gateway(gw: Gateway, spec: ModelSpec, n: int, tag: str) -> float:
    t0 = time.perf_counter()
    results = await asyncio.gather(*[
        gw.chat(spec, "bench", [{"role": "user", "content": f"{tag} gw {i}"}]) for i in range(n)])
    elapsed = time.perf_counter() - t0
    failed = [r.error for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} gateway calls failed, e.g. {failed[0]}")
    return elapsed


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1500)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    n, conc = args.calls, args.concurrency
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        proc, base = start_server(tmp)
        api_base = base + "/v1"
        try:
            spec = ModelSpec(name="bench", model="openai/bench", api_base=api_base, api_key_env=None,
                             temperature=0.0, top_p=None, max_tokens=32, seed=None, stop=None,
                             max_concurrency=conc, rpm=None, timeout_s=30, max_retries=3,
                             structured="json_schema", mode="chat", where="bench")
            # Warm-up: imports, connection pools.
            await bare_litellm(api_base, 64, conc, "warmup")
            rows = []
            for latency in (0.0, 0.05):
                control(base, "/_config", {"latency_s": latency})
                tag = f"lat{latency}"
                bare = await bare_litellm(api_base, n, conc, tag)
                gw = Gateway(tmp / f"cache-{latency}", "bench")
                control(base, "/_reset", {})
                cold = await via_gateway(gw, spec, n, tag)
                sent_cold = control(base, "/_stats").get("total", 0)
                control(base, "/_reset", {})
                warm = await via_gateway(gw, spec, n, tag)
                sent_warm = control(base, "/_stats").get("total", 0)
                gw.close()
                ideal = conc / latency if latency else float("inf")
                bare_rate, cold_rate = n / bare, n / cold
                reference = min(ideal, bare_rate)
                rows.append({
                    "latency_ms": latency * 1000, "calls": n, "concurrency": conc,
                    "ideal_calls_s": None if ideal == float("inf") else round(ideal, 1),
                    "bare_litellm_calls_s": round(bare_rate, 1),
                    "gateway_cold_calls_s": round(cold_rate, 1),
                    "gateway_vs_bare": round(cold_rate / bare_rate, 3),
                    "gateway_vs_ideal": None if ideal == float("inf") else round(cold_rate / ideal, 3),
                    "gateway_vs_min_ideal_bare": round(cold_rate / reference, 3),
                    "requests_cold": sent_cold,
                    "warm_s": round(warm, 3), "warm_vs_cold": round(warm / cold, 3),
                    "requests_warm": sent_warm,
                })
        finally:
            proc.terminate()
            proc.wait(5)
    for r in rows:
        print(json.dumps(r))
    print()
    print("| latency | ideal calls/s | bare litellm calls/s | gateway calls/s | gateway ÷ bare | "
          "gateway ÷ min(ideal, bare) | warm rerun ÷ cold | requests on warm rerun |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['latency_ms']:.0f} ms | {r['ideal_calls_s'] or '∞'} | {r['bare_litellm_calls_s']} | "
              f"{r['gateway_cold_calls_s']} | {r['gateway_vs_bare']:.0%} | "
              f"{r['gateway_vs_min_ideal_bare']:.0%} | {r['warm_vs_cold']:.1%} | {r['requests_warm']} |")


if __name__ == "__main__":
    asyncio.run(main())
