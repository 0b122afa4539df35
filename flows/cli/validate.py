"""``carryon validate``: human validation of the simulator and the judges (docs/validation.md).

sample -> page -> (annotators) -> import -> report. Errors are one line (``error: ...``, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from flows.cli.common import ConfigOpt, _fail, _warehouse_path

validate_app = typer.Typer(no_args_is_help=True,
                           help="Human validation: sample, annotation pages, import, agreement report.")



def _warehouse(config: str):
    from warehouse import Warehouse, WarehouseError

    path = _warehouse_path(config)
    try:
        return Warehouse(path).init()  # creates the validation tables in an older warehouse
    except WarehouseError as e:
        _fail(str(e))


def _spec(config: str):
    """The config's benchmark (its components register its own validation kinds)."""
    from tasks.config import ConfigError, load_config

    try:
        return load_config(config).spec
    except ConfigError as e:
        _fail(str(e))


def _sample_id(wh, kind: Optional[str], sample_id: Optional[str]) -> str:
    from tasks.validation import ValidationError
    from tasks.validation.report import kind_of
    from tasks.validation.sample import latest_sample

    if sample_id:
        return sample_id
    try:
        kind_of(kind or "")
    except ValidationError as e:
        _fail(f"{e} (or give --sample)")
    return latest_sample(wh, kind)


@validate_app.command("sample")
def sample(kind: str = typer.Option(..., "--kind", help=(
               "benutil | safety (any benchmark's judges) | a benchmark's own "
               "(CarryOnBench: naturalness)")),
           config: str = ConfigOpt,
           seed: int = typer.Option(0, help="The sampling seed (same seed, same sample)."),
           annotators: int = typer.Option(3, help="Annotators per unit."),
           scripts_per_length: int = typer.Option(
               30, "--scripts-per-length", "--flows-per-length",
               help="naturalness: scripts per length > 4."),
           per_annotator: int = typer.Option(12, help="naturalness: conversations per annotator (about)."),
           pairs: int = typer.Option(25, help="benutil: conversation pairs."),
           per_score: int = typer.Option(20, help="safety: model turns per judge score 1..5.")):
    """Draw a stratified, seeded sample from the warehouse and store it with its assignments."""
    from tasks.validation import ValidationError
    from tasks.validation.sample import draw_sample

    spec = _spec(config)
    wh = _warehouse(config)
    try:
        res = draw_sample(wh, kind, seed, annotators, spec=spec,
                          scripts_per_length=scripts_per_length, per_annotator=per_annotator,
                          pairs=pairs, per_score=per_score)
    except ValidationError as e:
        _fail(str(e))
    typer.echo(f"sample {res['sample_id']}: {res['n_units']} units")
    for n in res["notes"]:
        typer.echo(f"  {n}")
    typer.echo("  assignments: " + ", ".join(f"{a} {n}" for a, n in res["assignments"].items()))


@validate_app.command("page")
def page(config: str = ConfigOpt,
         kind: Optional[str] = typer.Option(None, "--kind", help="The latest sample of this kind."),
         sample_id: Optional[str] = typer.Option(None, "--sample", help="A sample id (default: latest of --kind)."),
         out: Path = typer.Option(..., "--out", help="Folder for the pages (one per annotator).")):
    """Write one offline HTML annotation page per annotator."""
    from tasks.validation import ValidationError
    from tasks.validation.page import write_pages

    spec = _spec(config)
    wh = _warehouse(config)
    try:
        paths = write_pages(wh, _sample_id(wh, kind, sample_id), out, spec)
    except ValidationError as e:
        _fail(str(e))
    for p in paths:
        typer.echo(str(p))
    typer.echo(f"{len(paths)} pages")


@validate_app.command("import")
def import_cmd(files: List[Path] = typer.Argument(..., help="The annotators' exported JSON files."),
               config: str = ConfigOpt,
               replace: bool = typer.Option(False, "--replace", help=(
                   "Replace an annotator's labels that differ from the file's (refused "
                   "otherwise)."))):
    """Import exported annotations (an annotator's different labels need --replace)."""
    from tasks.validation import ValidationError
    from tasks.validation.annotations import import_files

    _spec(config)  # its own validation kinds registered
    wh = _warehouse(config)
    try:
        res = import_files(wh, files, replace=replace)
    except ValidationError as e:
        _fail(str(e))
    for r in res:
        typer.echo(f"{r['file']}: {r['sample_id']} {r['annotator']}: {r['labels']} of {r['questions']} labels"
                   + (f" (replaced {r['replaced']} earlier labels)" if r["replaced"] else ""))


@validate_app.command("report")
def report(config: str = ConfigOpt,
           json_out: bool = typer.Option(False, "--json", help="Print the numbers as JSON."),
           out: Optional[Path] = typer.Option(None, "--out", help="Also write the markdown here.")):
    """Agreement: Ben-Util and safety against the judge, a benchmark's own study (CarryOnBench's
    naturalness: majority, kappa, alpha)."""
    from tasks.validation import ValidationError
    from tasks.validation.report import render_markdown, validation_report

    _spec(config)  # its own validation kinds registered
    wh = _warehouse(config)
    try:
        rep = validation_report(wh)
    except ValidationError as e:
        _fail(str(e))
    md = render_markdown(rep)
    if out:
        try:
            out.write_text(md, encoding="utf-8")
        except OSError as e:
            _fail(f"{out}: cannot write: {e.strerror}")
    typer.echo(json.dumps(rep, default=str, indent=1) if json_out else md)
