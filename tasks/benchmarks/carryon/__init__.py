"""CarryOnBench, beside its spec (spec.yaml).

Its own prompt templates are in prompts/ beside this file, named ``carryon/<file>``: mounted here,
on the package's import, so any of its modules finds them, in a run or a unit test alike
(prompts/__init__.py says how names are found)."""

from pathlib import Path

import prompts
from tasks.core import registry
from tasks.benchmarks.carryon import settings  # noqa: F401 (registers its keys of the config)

prompts.mount("carryon", Path(__file__).with_name("prompts"))
# Its own tables (tables.py, rendered in schema.json beside it), in every warehouse.
registry.tables("tasks.benchmarks.carryon.tables", Path(__file__).with_name("schema.json"))
