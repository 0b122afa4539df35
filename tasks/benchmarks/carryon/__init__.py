"""CarryOnBench, beside its spec (spec.yaml).

Its own prompt templates are in prompts/ beside this file, named ``carryon/<file>``: mounted here,
on the package's import, so any of its modules finds them, in a run or a unit test alike
(prompts/__init__.py says how names are found)."""

from pathlib import Path

import prompts
from tasks.benchmarks.carryon import settings  # noqa: F401 (registers its keys of the config)

prompts.mount("carryon", Path(__file__).with_name("prompts"))
