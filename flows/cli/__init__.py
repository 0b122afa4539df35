"""The ``carryon`` command line.

Every command validates its input first and exits non-zero with a one-line error that names
the cause (file, field, variable or URL); tracebacks are for bugs, not for user mistakes.

This module assembles the typer ``app`` and ``main``; the commands live beside it:
``run.py`` (``run``, ``plan``), ``check.py`` (``check``), ``inputs.py`` (``data``, ``flows``),
``results.py`` (``sql``, ``report``), ``cache.py`` (``cache ...``), ``local_model.py`` (``local-model ...``),
``prefect.py`` (``server ...``, ``merge``), ``validate.py`` (``validate ...``),
``calibrate.py`` (``calibrate``: two settings of a judge, their agreement),
``export.py`` (``export``, ``import``) and
``episodes.py`` (``data`` and ``report`` of an episode benchmark); ``common.py`` and
``table.py`` are what they share.
"""

from __future__ import annotations

import os
import sys

# Before Prefect is imported anywhere: this machine has no internet, so no telemetry.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
# The temporary Prefect server can take longer than its default to start on a busy 2-core box.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import typer  # noqa: E402

from flows.cli import (  # noqa: E402
    cache, calibrate, check, export, inputs, local_model, prefect, results, run, validate,
)

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="CarryOnBench: utility recovery under benign intent clarification.")
# `carryon --help` lists the commands in this order, then the groups in theirs.
app.command("merge")(prefect.merge)
app.command()(run.run)
app.command()(run.plan)
app.command()(check.check)
app.command()(results.sql)
app.command()(inputs.data)
app.command("scripts")(inputs.scripts_cmd)
app.command("flows", hidden=True)(inputs.scripts_cmd)  # its name before "scripts"
app.command()(results.report)
app.command()(export.export)
app.command("import")(export.import_cmd)
app.command()(calibrate.calibrate)
app.add_typer(cache.cache_app, name="cache")
app.add_typer(local_model.local_app, name="local-model")
app.add_typer(prefect.server_app, name="server")
app.add_typer(validate.validate_app, name="validate")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
