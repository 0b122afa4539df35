"""Commands that answer at once (issue 55): two checkouts side by side.

    .venv/bin/python perf/command_latency.py --base /path/to/other/checkout [--queries 100]
        [--rounds 3] [--casebench FILE] [--json F]

Each figure is the wall time of ``carryon ...`` in a fresh process (``python -m flows.cli``,
imports included, from the command to the prompt), each checkout with its own virtualenv:

1. **plan**: ``carryon plan`` of configs/paper.yaml (fourteen targets) on a CASE-Bench file
   of 410 queries (``--casebench``, else one written in the published file's shapes),
   first in a home with no rate memo yet (what a user's first plan pays), then again.
2. **cached run, demo**: configs/demo.yaml's pipeline (one query, lengths 4 and 6), every
   model on the loopback test server instead of the local model; a cold run fills the cache
   and the memos, a warm-up rerun, then ``--rounds`` timed reruns: every stage unchanged.
3. **cached run, 100 queries**: the same for one target of ``--queries`` CASE-Bench-shaped
   queries at the paper's sampling (lengths 4-12, two BC and one NC script per length and
   the oracle: 1,600 conversations); the home is built once, by this checkout, and copied.
4. **Ctrl-C in the report**: a rerun of that home whose report must be written again (the
   report folders deleted), SIGINT to its process group 1.5 s after the report stage
   begins; the seconds from the signal to the process's exit, its exit status, and whether
   the next run wrote the report.

The checkouts alternate within each round (base, this, ...) so the machine's drift hits
both. Printed: every figure, the medians, and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perf.gateway_throughput import start_server  # noqa: E402
from perf.paper_volume import casebench_file  # noqa: E402
from perf.pipeline_throughput import bench_config  # noqa: E402


def _env(checkout: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "CARRYON_"))}
    return {**env, "PYTHONPATH": str(checkout), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}


def carryon(checkout: Path, *args: str) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run([str(checkout / ".venv/bin/python"), "-m", "flows.cli", *args],
                       cwd=checkout, env=_env(checkout), capture_output=True, text=True)
    return time.perf_counter() - t0, p


def must(checkout: Path, *args: str) -> float:
    seconds, p = carryon(checkout, *args)
    if p.returncode != 0:
        raise RuntimeError(f"{checkout}: carryon {' '.join(args)} exited {p.returncode}: "
                           f"{p.stderr[-2000:]}")
    return seconds


def write_config(doc: dict, path: Path, home: Path) -> Path:
    path.write_text(yaml.safe_dump({**doc, "home": str(home)}))
    return path


def ctrl_c_in_report(checkout: Path, config: Path, home: Path, delay_s: float = 1.5) -> dict:
    """SIGINT 1.5 s after the report stage begins; seconds to exit, exit status, and whether
    the rerun wrote the report."""
    for folder in (home / "reports").glob("*"):
        if not folder.name.startswith("."):
            shutil.rmtree(folder)  # nothing to keep: the run writes its report
    proc = subprocess.Popen([str(checkout / ".venv/bin/python"), "-m", "flows.cli", "run",
                             "--config", str(config)], cwd=checkout, env=_env(checkout),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    began = None
    for line in proc.stderr:
        if "for flow 'report'" in line:
            began = time.perf_counter()
            break
    if began is None:
        proc.wait()
        raise RuntimeError(f"{checkout}: the report never began (exit {proc.returncode})")
    time.sleep(delay_s)
    signalled = time.perf_counter()
    os.killpg(proc.pid, signal.SIGINT)
    proc.stderr.read()
    rc = proc.wait()
    stop_s = time.perf_counter() - signalled
    must(checkout, "run", "--config", str(config))
    written = [p for p in (home / "reports").glob("*") if not p.name.startswith(".")]
    return {"exit": rc, "signal_to_exit_s": stop_s, "rerun_wrote_report": bool(written)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True, help="the other checkout (e.g. main)")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--casebench", type=Path, help="a CASE-Bench file (default: one written "
                    "in the published file's shapes, 410 queries)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    checkouts = {"base": args.base.resolve(), "this": ROOT}
    tmp = Path(tempfile.mkdtemp(prefix="command-latency-"))
    server, base_url = start_server(tmp)
    results: dict = {name: {"plan_first": [], "plan_again": [], "demo": [], "home": [],
                            "ctrl_c": []} for name in checkouts}
    load = []
    try:
        casebench = args.casebench or casebench_file(tmp / "casebench.json", 10)
        paper = yaml.safe_load((ROOT / "configs" / "paper.yaml").read_text())
        paper["dataset"]["path"] = str(casebench)
        demo = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
        demo["models"]["defaults"]["api_base"] = base_url + "/v1"
        demo["models"]["defaults"]["timeout_s"] = 60
        data = casebench_file(tmp / "casebench-small.json", -(-args.queries // 41))
        big = bench_config(base_url + "/v1", tmp / "unused", 1, 64, args.queries)
        big["dataset"] = {"source": "casebench", "path": str(data), "limit": args.queries}

        # The 100-query home, built once by this checkout, then one copy per checkout.
        built = tmp / "home-built"
        t = must(ROOT, "run", "--config", str(write_config(big, tmp / "build.yaml", built)))
        print(f"100-query home built in {t:.0f} s", flush=True)
        configs = {}
        for name, checkout in checkouts.items():
            home = tmp / f"home-{name}"
            shutil.copytree(built, home)
            configs[name] = {
                "big": (write_config(big, tmp / f"big-{name}.yaml", home), home),
                "demo": write_config(demo, tmp / f"demo-{name}.yaml", tmp / f"demo-{name}")}
            # Cold demo run, then a warm-up of each: the memos under this checkout's source.
            must(checkout, "run", "--config", str(configs[name]["demo"]))
            for cfg in (configs[name]["demo"], configs[name]["big"][0]):
                must(checkout, "run", "--config", str(cfg))
        for r in range(args.rounds):
            for name, checkout in checkouts.items():
                out = results[name]
                plan_home = tmp / f"plan-{name}-{r}"
                plan_cfg = write_config(paper, tmp / f"paper-{name}-{r}.yaml", plan_home)
                out["plan_first"].append(must(checkout, "plan", "--config", str(plan_cfg)))
                out["plan_again"].append(must(checkout, "plan", "--config", str(plan_cfg)))
                out["demo"].append(must(checkout, "run", "--config", str(configs[name]["demo"])))
                out["home"].append(must(checkout, "run", "--config", str(configs[name]["big"][0])))
                out["ctrl_c"].append(ctrl_c_in_report(checkout, *configs[name]["big"]))
                load.append(os.getloadavg()[0])
                print(f"round {r + 1} {name}: plan {out['plan_first'][-1]:.2f} s (again "
                      f"{out['plan_again'][-1]:.2f} s), cached run demo {out['demo'][-1]:.2f} s, "
                      f"{args.queries}-query home {out['home'][-1]:.2f} s, Ctrl-C in report: "
                      f"{out['ctrl_c'][-1]}", flush=True)
    finally:
        server.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    med = statistics.median
    print("\nmedians (seconds, command to prompt):")
    print(f"{'':28}{'base':>10}{'this':>10}")
    for key, label in (("plan_first", "plan paper.yaml, first"), ("plan_again", "plan paper.yaml, again"),
                       ("demo", "cached run, demo"), ("home", f"cached run, {args.queries} queries")):
        print(f"{label:28}{med(results['base'][key]):10.2f}{med(results['this'][key]):10.2f}")
    stops = {n: med(c["signal_to_exit_s"] for c in results[n]["ctrl_c"]) for n in results}
    print(f"{'Ctrl-C in report to exit':28}{stops['base']:10.2f}{stops['this']:10.2f}")
    print(f"exit statuses: base {[c['exit'] for c in results['base']['ctrl_c']]}, this "
          f"{[c['exit'] for c in results['this']['ctrl_c']]}; rerun wrote the report: base "
          f"{all(c['rerun_wrote_report'] for c in results['base']['ctrl_c'])}, this "
          f"{all(c['rerun_wrote_report'] for c in results['this']['ctrl_c'])}")
    print(f"machine: {os.cpu_count()} cores, load average (1 min) per round {load}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "load": load}, indent=1))


if __name__ == "__main__":
    main()
