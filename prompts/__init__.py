"""Every prompt is a Jinja2 template in this folder; ``render`` is the only way to use one.

Templates are rendered with StrictUndefined, so a missing variable is an error rather than an
empty string in a prompt. ``template_version`` hashes template sources: judgment sets record
it, and the gateway's cache key already contains the rendered text, so editing a template
re-runs exactly the calls whose prompt changed.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

PROMPTS_DIR = Path(__file__).parent


@lru_cache(maxsize=1)
def _env() -> Environment:
    return Environment(loader=FileSystemLoader(str(PROMPTS_DIR)), undefined=StrictUndefined,
                       keep_trailing_newline=False, trim_blocks=True, lstrip_blocks=True,
                       autoescape=False)


def render(name: str, **context) -> str:
    """Render ``prompts/<name>`` (e.g. ``"judge/benutil.j2"``) and strip outer whitespace."""
    return _env().get_template(name).render(**context).strip()


def template_version(*names: str) -> str:
    """A short hash of the named templates' sources (and the templates they include)."""
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode())
        h.update((PROMPTS_DIR / name).read_bytes())
    return h.hexdigest()[:12]
