"""Cost growth of the gateway: time and peak memory per call at 1 K, 10 K and 100 K calls.

    .venv/bin/python perf/memory_growth.py [--sizes 1000,10000,100000] [--concurrency 64]

The test server runs in its own process at 0 ms latency. Each size runs in a FRESH
subprocess so peaks do not mix; in it, after imports and a 64-call warm-up (baseline RSS),
all N calls are submitted at once with ``asyncio.gather`` (the worst case: every pending call,
its prompt and its provenance record are alive together, as in one huge judge batch), each a
structured Ben-Util-shaped judge call (about 1.5 KB of prompt, ``BenUtilVerdict`` schema)
through ``Gateway.chat`` with a cold cache. Provenance records are kept until the end (never
drained), as a stage that never flushed would. Reported per size: wall time, time per call,
peak RSS (``ru_maxrss``), peak minus baseline, and that growth per 1 K calls.
Target: peak RSS at 100 K calls <= 1.5 GB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from perf.gateway_throughput import control, start_server  # noqa: E402

PADDING = ("The assistant's response discusses the topic at length, with background, steps, "
           "caveats and references. " * 12)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


async def child(n: int, api_base: str, conc: int, cache_dir: Path) -> dict:
    from tasks.config import ModelSpec
    from tasks.gateway import Gateway
    from tasks.judges.prompts import BenUtilVerdict

    spec = ModelSpec(name="judge", model="openai/bench-judge", api_base=api_base, api_key_env=None,
                     temperature=0.0, top_p=None, max_tokens=64, seed=None, stop=None,
                     max_concurrency=conc, rpm=None, timeout_s=60, max_retries=3,
                     structured="json_schema", mode="chat", where="bench")
    gw = Gateway(cache_dir, "bench")

    def msgs(tag: str, i: int) -> list[dict]:
        return [{"role": "system", "content": "You judge whether a response fulfils one checklist item."},
                {"role": "user", "content": f"Item {i} ({tag}): does it explain the legal framework?\n"
                                            f"Response:\n{PADDING}"}]

    warm = await asyncio.gather(*[gw.chat(spec, "benutil_judge", msgs("warm", i), schema=BenUtilVerdict)
                                  for i in range(64)])
    assert all(r.ok for r in warm), warm[0].error
    base_rss, base_peak = rss_mb(), peak_mb()
    t0 = time.perf_counter()
    results = await asyncio.gather(*[gw.chat(spec, "benutil_judge", msgs("run", i), schema=BenUtilVerdict)
                                     for i in range(n)])
    wall = time.perf_counter() - t0
    failed = [r for r in results if not r.ok]
    if failed:
        raise SystemExit(f"{len(failed)} of {n} calls failed, e.g. {failed[0].error}")
    records = len(gw.drain_records())
    gw.close()
    peak = peak_mb()
    return {"calls": n, "wall_s": round(wall, 2), "ms_per_call": round(1000 * wall / n, 3),
            "calls_s": round(n / wall, 1), "baseline_rss_mb": round(base_rss, 1),
            "peak_rss_mb": round(peak, 1), "growth_mb": round(peak - max(base_rss, base_peak), 1),
            "growth_kb_per_call": round(1024 * (peak - max(base_rss, base_peak)) / n, 2),
            "records": records}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--api-base", help=argparse.SUPPRESS)
    ap.add_argument("--cache-dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(child(args.child, args.api_base, args.concurrency, args.cache_dir))))
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        proc, base = start_server(tmp)
        try:
            control(base, "/_config", {"latency_s": 0.0})
            for n in (int(s) for s in args.sizes.split(",")):
                control(base, "/_reset", {})
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(n), "--api-base", base + "/v1",
                     "--concurrency", str(args.concurrency), "--cache-dir", str(tmp / f"cache-{n}")],
                    capture_output=True, text=True, cwd=ROOT)
                if out.returncode != 0:
                    raise SystemExit(f"size {n} failed:\n{out.stderr[-3000:]}")
                row = json.loads(out.stdout.strip().splitlines()[-1])
                row["served"] = control(base, "/_stats").get("total", 0) - 64  # minus warm-up
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            proc.terminate()
            proc.wait(5)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    print("\n| calls | wall s | ms per call | calls/s | baseline RSS MB | peak RSS MB | "
          "growth MB | growth KB per call |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['calls']:,} | {r['wall_s']} | {r['ms_per_call']} | {r['calls_s']} | "
              f"{r['baseline_rss_mb']} | {r['peak_rss_mb']} | {r['growth_mb']} | {r['growth_kb_per_call']} |")
    big = [r for r in rows if r["calls"] >= 100_000]
    if big:
        ok = "met" if big[0]["peak_rss_mb"] <= 1536 else "NOT met"
        print(f"\npeak RSS at {big[0]['calls']:,} calls: {big[0]['peak_rss_mb']} MB (target ≤ 1.5 GB: {ok})")


if __name__ == "__main__":
    main()
