"""CarryOnBench at the paper's volume, 1 and N targets, two checkouts side by side.

    .venv/bin/python perf/paper_volume.py --base /path/to/other/checkout [--queries 410]
        [--targets 1] [--rounds 1] [--concurrency 64] [--json F]

The paper's volume per target: 410 CASE-Bench queries (the file's 450 less the four excluded
categories), every length 4-12 with two BC scripts and one NC script per length, and the
oracle: 410 x 16 = 6,560 conversations. The published file cannot ship (review-only terms),
so a file in its shapes is written with team text (tests/fixtures/published_shapes.py, ten
queries per category); ``--queries 100`` takes the first 100 of a file in those shapes
(``dataset.limit``: 1,600 conversations per target), the size the issue-55 figures use. Every
role runs on the loopback test server (its own process, 0 ms); one model string and one
limit of ``--concurrency`` in flight for all roles, the targets and ensemble members told
apart by temperature (as perf/pipeline_throughput.py does).

Each checkout runs ``carryon run`` (the whole pipeline, a fresh process, its own cold home
and cache) under /usr/bin/time: wall seconds, requests per second over that wall, and the
peak resident memory of the largest process (the run's own; the gateway's worker processes
are counted apart). With ``--targets N`` (N > 1) each checkout runs once with one target and
once with N, so the growth of memory with targets is read within one checkout. With
``--rounds`` > 1 the runs alternate (base, this, base, this, ...) so the machine's drift hits
both. Printed: each run's figures, the medians per (checkout, targets), this checkout over
the base's, and N targets over one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
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


def run_once(checkout: Path, config: dict, tmp: Path, tag: str, keep: bool = True) -> dict:
    """One `carryon run` in a fresh process; ``keep=False`` removes its home after (a 410-query
    home with its cache is hundreds of MB)."""
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
    wall_s = h * 3600 + m * 60 + s
    requests = wh.query("SELECT sum(requests) AS n FROM runs")[0]["n"]
    out = {"checkout": str(checkout), "wall_s": wall_s, "peak_rss_mb": rss / 1024,
           "conversations": wh.count("conversations"), "requests": requests,
           "requests_per_s": requests / wall_s}
    if not keep:
        shutil.rmtree(home, ignore_errors=True)
    return out


FIGURES = ("wall_s", "requests_per_s", "peak_rss_mb")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True, help="the other checkout (e.g. main)")
    ap.add_argument("--queries", type=int, default=410, help="queries (10 per category: 410)")
    ap.add_argument("--targets", type=int, default=1,
                    help="N: each checkout runs with 1 target and with N")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    per_category = -(-args.queries // 41)
    sizes = sorted({1, args.targets})
    checkouts = (("base", args.base.resolve()), ("this", ROOT))
    print(f"{args.queries} queries, targets {sizes}, {args.rounds} round(s); load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    runs: dict[tuple, list] = {(tag, n): [] for tag, _ in checkouts for n in sizes}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        server, base_url = start_server(tmp)
        try:
            data = casebench_file(tmp / "casebench.json", per_category)
            for i in range(args.rounds):
                for n in sizes:
                    config = bench_config(base_url + "/v1", tmp / "unused", n, args.concurrency,
                                          args.queries)
                    config["dataset"] = {"source": "casebench", "path": str(data),
                                         "limit": args.queries}
                    for tag, checkout in checkouts:
                        r = run_once(checkout, config, tmp, f"{tag}{i}-{n}t", keep=False)
                        runs[(tag, n)].append(r)
                        print(f"{tag:4} {n:2} target(s) round {i}: {r['wall_s']:7.1f} s wall, "
                              f"{r['requests_per_s']:6.1f} requests/s, peak RSS "
                              f"{r['peak_rss_mb']:7.1f} MB, {r['conversations']} conversations, "
                              f"{r['requests']} requests; load {os.getloadavg()[0]:.2f}",
                              flush=True)
        finally:
            server.terminate()
    med = {k: {f: statistics.median(r[f] for r in rs) for f in FIGURES} for k, rs in runs.items()}
    for n in sizes:
        b, t = med[("base", n)], med[("this", n)]
        print(f"{n:2} target(s), medians: wall base {b['wall_s']:.1f} s, this {t['wall_s']:.1f} s "
              f"(this/base {t['wall_s'] / b['wall_s']:.3f}); requests/s base "
              f"{b['requests_per_s']:.1f}, this {t['requests_per_s']:.1f}; peak RSS base "
              f"{b['peak_rss_mb']:.0f} MB, this {t['peak_rss_mb']:.0f} MB "
              f"(this/base {t['peak_rss_mb'] / b['peak_rss_mb']:.3f})")
    if len(sizes) > 1:
        n = sizes[-1]
        for tag, _ in checkouts:
            one, many = med[(tag, 1)]["peak_rss_mb"], med[(tag, n)]["peak_rss_mb"]
            print(f"{tag}: peak RSS with {n} targets over 1 target: {many / one:.3f} "
                  f"({many - one:+.0f} MB)")
    if args.json:
        args.json.write_text(json.dumps({"runs": {f"{tag}-{n}": rs for (tag, n), rs in runs.items()},
                                         "median": {f"{tag}-{n}": m for (tag, n), m in med.items()}},
                                        indent=1))


if __name__ == "__main__":
    main()
