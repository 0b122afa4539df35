"""``carryon calibrate``: two settings of one judge on a sample of the stored responses, and how
far they agree (tasks/engine/calibrate.py; docs/fidelity.md says when to run it)."""

from __future__ import annotations

from typing import List, Optional

import typer

from flows.cli.common import ConfigOpt, _fail, _warehouse_path
from flows.cli.table import _print_table
from tasks.config import ConfigError, load_config


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


def _num(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def calibrate(config: str = ConfigOpt,
              judge: str = typer.Option(..., "--judge", help="The spec's judge (e.g. benutil)."),
              sample: int = typer.Option(..., "--sample", help="Responses to judge both ways "
                                                                "(whole conversations, about)."),
              against: Optional[str] = typer.Option(
                  None, "--against", help="A config whose judge is the second setting "
                                          "(another model, another benchmark folder's prompts)."),
              set_args: Optional[List[str]] = typer.Option(
                  None, "--set", help="ARG=VALUE: the second setting is the first with this "
                                      "judge argument changed (repeatable)."),
              seed: int = typer.Option(0, help="The sample's and the bootstrap's seed."),
              boot: int = typer.Option(1000, help="Bootstrap replicates of the intervals.")):
    """Judge a seeded, stratified sample both ways; print the agreement (Cohen's kappa with a
    clustered interval), the Table 2 shifts and where the settings disagree most. With
    neither --against nor --set, Ben-Util's second setting is its other mode."""
    import asyncio

    from tasks.engine.calibrate import CalibrationError, calibrate as run, parse_sets
    from tasks.engine.run import RunContext
    from warehouse import Warehouse, WarehouseError

    try:
        cfg = load_config(config)
        other = load_config(against) if against else None
    except ConfigError as e:
        _fail(str(e))
    try:
        wh = Warehouse(_warehouse_path(config)).init()
    except WarehouseError as e:
        _fail(str(e))
    ctx = RunContext(run_id=f"calibrate-{seed}", config=cfg, warehouse=wh, stages=["verdicts"])
    try:
        res = asyncio.run(run(ctx, judge, sample, seed, other,
                              parse_sets(set_args) if set_args else None, n_boot=boot))
    except (CalibrationError, ConfigError) as e:
        _fail(str(e))
    finally:
        if ctx._gateway is not None:
            ctx._gateway.close()
    _print(res)


def _print(res: dict) -> None:
    s = res["sample"]
    typer.echo(f"calibration {res['calibration_id']} of {res['kind']} ({res['benchmark']}): "
               f"{s['responses']} responses in {s['episodes']} episodes of {s['items']} items, "
               f"seed {s['seed']}, stratified by target and condition")
    for label in ("a", "b"):
        c = res["calls"][label]
        typer.echo(f"  {label}: {res[label].describe()}; {c['calls']} calls "
                   f"({c['failed_calls']} failed, {c['revisions']} re-asks)")
    level = round(100 * res["level"])
    for m, st in res["measures"].items():
        ci = (f" [{_num(st['ci_lo'])}, {_num(st['ci_hi'])}] ({level} % bootstrap over "
              f"{st['n_clusters']} items)" if st["ci_lo"] is not None else
              " (no interval: fewer than two items, or undefined)")
        typer.echo(f"{m}: {st['n']} units both scored; agreement {_pct(st['share'])}, "
                   f"disagreement {_pct(st['disagree'])}; Cohen's kappa {_num(st['kappa'])}{ci}; "
                   f"unscored: a {st['n_unscored_a']}, b {st['n_unscored_b']}")
        for by, rows in st["by"].items():
            if len(rows) > 1:
                worst = max(rows, key=lambda r: (r["disagree"], r["n"]))
                typer.echo(f"  most disagreement by {by}: {worst[by]} "
                           f"({worst['n_disagree']} of {worst['n']}, {_pct(worst['disagree'])})")
    if res["cells"]:
        typer.echo("Table 2 of the sample under each setting, and the shift (b - a) with its "
                   f"{level} % interval (paired bootstrap over items):")
        _print_table([{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}
                      for r in res["cells"]])
    typer.echo(f"stored: judge_calibrations (carryon sql \"SELECT * FROM judge_calibrations "
               f"WHERE calibration_id = '{res['calibration_id']}'\")")
