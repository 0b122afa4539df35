"""Exporting the paper-volume home for one target (issue 54): wall time and peak memory.

    .venv/bin/python perf/export_volume.py [--home DIR] [--queries 410] [--keep DIR] [--json F]

Without ``--home`` it first builds the home as perf/paper_volume.py does (410 CASE-Bench-shaped
queries, lengths 4-12, two BC and one NC script per length and the oracle: 6,560
conversations, every role on the loopback server; ~7-15 min), then runs ``carryon export``
in a fresh process under /usr/bin/time, twice: ``--format hf`` as a user gets it (CASE-Bench
does not allow redistribution, so the queries' text is left out: the slower path) and with
``--include-restricted``, then ``--format inspect``. Printed: the home's size, and for each
export its wall seconds, the peak resident memory of the process, the folder's size.
Goal: under a minute and under 1 GB on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perf.gateway_throughput import start_server  # noqa: E402
from perf.paper_volume import casebench_file, run_once  # noqa: E402
from perf.pipeline_throughput import bench_config  # noqa: E402


def timed_export(config: Path, out: Path, *extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "DO_NOT_TRACK": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "flows.cli", "export",
                        "--config", str(config), "--out", str(out), *extra],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"carryon export {' '.join(extra)} exited {p.returncode}: {p.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", p.stderr)
    h, m, s = int(wall.group(1) or 0), int(wall.group(2)), float(wall.group(3))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    return {"args": " ".join(extra), "wall_s": h * 3600 + m * 60 + s, "peak_rss_mb": rss / 1024,
            "size_mb": size / 2**20, "stdout": p.stdout.strip().splitlines()[-1:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--home", type=Path, help="a paper-volume home already built (its config "
                    "is <home>/../export_volume.yaml); default: build one")
    ap.add_argument("--queries", type=int, default=410)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--keep", type=Path, help="build the home here and keep it")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    try:
        if args.home:
            config = args.home.parent / "export_volume.yaml"
        else:
            where = args.keep or tmp
            where.mkdir(parents=True, exist_ok=True)
            server, base_url = start_server(tmp)
            try:
                data = casebench_file(where / "casebench.json", -(-args.queries // 41))
                cfg = bench_config(base_url + "/v1", where / "unused", 1, args.concurrency,
                                   args.queries)
                cfg["dataset"] = {"source": "casebench", "path": str(data), "limit": args.queries}
                r = run_once(ROOT, cfg, where, "export-volume")
                print(f"home built: {r['wall_s']:.0f} s, {r['conversations']} conversations, "
                      f"{r['requests']} requests", flush=True)
            finally:
                server.terminate()
            config = where / "export_volume.yaml"
            config.write_text(yaml.safe_dump({**cfg, "home": str(where / "home-export-volume")}))
        home = Path(yaml.safe_load(config.read_text())["home"])
        wh_mb = (home / "warehouse.duckdb").stat().st_size / 2**20
        print(f"home: {home} (warehouse {wh_mb:.0f} MB)", flush=True)
        results = []
        for fmt, extra in (("hf", ()), ("hf", ("--include-restricted",)), ("inspect", ())):
            out = tmp / f"out-{fmt}-{len(results)}"
            r = timed_export(config, out, "--format", fmt, *extra)
            results.append(r)
            print(f"export {r['args']:38}: {r['wall_s']:6.1f} s wall, peak RSS "
                  f"{r['peak_rss_mb']:6.0f} MB, {r['size_mb']:6.1f} MB written; {r['stdout']}",
                  flush=True)
            shutil.rmtree(out, ignore_errors=True)
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()}")
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
