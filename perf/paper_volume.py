"""CarryOnBench at the paper's volume for one target, two checkouts side by side.

    .venv/bin/python perf/paper_volume.py --base /path/to/other/checkout [--queries 410]
        [--rounds 1] [--concurrency 64] [--json F]

The paper's volume per target: 410 CASE-Bench queries (the file's 450 less the four excluded
categories), every length 4-12 with two BC scripts and one NC script per length, and the
oracle: 410 x 16 = 6,560 conversations. The published file cannot ship (review-only terms),
so a file in its shapes is written with team text (tests/fixtures/published_shapes.py, ten
queries per category). Every role runs on the loopback test server (its own process, 0 ms);
one model string and one limit of ``--concurrency`` in flight for all roles, the targets and
ensemble members told apart by temperature (as perf/pipeline_throughput.py does).

Each checkout runs ``carryon run`` (the whole pipeline, a fresh process, its own cold home
and cache) under /usr/bin/time: wall seconds and the peak resident memory of the largest
process (the run's own; the gateway's worker processes are counted apart). With
``--rounds`` > 1 the two alternate (base, this, base, this, ...) so the machine's drift hits
both. Printed: each run's figures, the medians, and this checkout's over the base's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perf.gateway_throughput import start_server  # noqa: E402
from perf.pipeline_throughput import bench_config  # noqa: E402
from tests.fixtures.published_shapes import published_shape_rows  # noqa: E402


def casebench_file(path: Path, per_category: int) -> Path:
    """``per_category`` queries per SORRY-Bench category, in the published file's shapes."""
    rows = []
    for k in range(per_category):
        for r in published_shape_rows():
            rows.append({**r, "query": r["query"].replace("?", f" (variant {k})?")})
    path.write_text(json.dumps(rows, indent=1))
    return path


def run_once(checkout: Path, config: dict, tmp: Path, tag: str) -> dict:
    home = tmp / f"home-{tag}"
    path = tmp / f"{tag}.yaml"
    path.write_text(yaml.safe_dump({**config, "home": str(home)}))
    env = {**os.environ, "PYTHONPATH": str(checkout), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "flows.cli", "run",
                        "--config", str(path)], cwd=checkout, env=env, capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{tag}: carryon run exited {p.returncode}: {p.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", p.stderr)
    h, m, s = (int(wall.group(1) or 0), int(wall.group(2)), float(wall.group(3)))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    from warehouse import Warehouse

    wh = Warehouse(home / "warehouse.duckdb")
    return {"checkout": str(checkout), "wall_s": h * 3600 + m * 60 + s, "peak_rss_mb": rss / 1024,
            "conversations": wh.count("conversations"),
            "requests": wh.query("SELECT sum(requests) AS n FROM runs")[0]["n"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True, help="the other checkout (e.g. main)")
    ap.add_argument("--queries", type=int, default=410, help="queries (10 per category: 410)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    per_category = -(-args.queries // 41)
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        server, base_url = start_server(tmp)
        try:
            data = casebench_file(tmp / "casebench.json", per_category)
            config = bench_config(base_url + "/v1", tmp / "unused", 1, args.concurrency, args.queries)
            config["dataset"] = {"source": "casebench", "path": str(data), "limit": args.queries}
            runs = {"base": [], "this": []}
            for i in range(args.rounds):
                for tag, checkout in (("base", args.base.resolve()), ("this", ROOT)):
                    r = run_once(checkout, config, tmp, f"{tag}{i}")
                    runs[tag].append(r)
                    print(f"{tag:4} round {i}: {r['wall_s']:7.1f} s wall, peak RSS "
                          f"{r['peak_rss_mb']:7.1f} MB, {r['conversations']} conversations, "
                          f"{r['requests']} requests", flush=True)
        finally:
            server.terminate()
    med = {tag: {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "peak_rss_mb")}
           for tag, rs in runs.items()}
    print(f"median wall: base {med['base']['wall_s']:.1f} s, this {med['this']['wall_s']:.1f} s "
          f"(this/base {med['this']['wall_s'] / med['base']['wall_s']:.3f}); median peak RSS: "
          f"base {med['base']['peak_rss_mb']:.0f} MB, this {med['this']['peak_rss_mb']:.0f} MB "
          f"(this/base {med['this']['peak_rss_mb'] / med['base']['peak_rss_mb']:.3f})")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "median": med}, indent=1))


if __name__ == "__main__":
    main()
