"""Every prompt is a Jinja2 template in this folder; ``render`` is the only way to use one.

Templates are rendered with StrictUndefined, so a missing variable is an error rather than an
empty string in a prompt. ``template_version`` hashes template sources: judgment sets record
it, and the gateway's cache key already contains the rendered text, so editing a template
re-runs exactly the calls whose prompt changed.

Model-written text (a target's answer, a simulated user's turn, a construction model's
answer or checklist) is untrusted wherever a prompt shows it: templates write it as
``{{ fenced(text, "LABEL") }}``, a block between two marker lines whose token is derived
from a hash of the text (``fence``), so the text cannot close its own block
or pass itself off as another turn; the template says that a fenced block is data.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

PROMPTS_DIR = Path(__file__).parent


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def fence(text: str) -> tuple[str, str]:
    """(token, safe_text): a boundary token for ``text`` and the text with the token removed.

    The token is a hash of the original text, so writing a matching END line would need a
    text that contains its own hash. Removing stray occurrences covers the rest; the
    replacement holds no hex digit, so it cannot form a new occurrence with its neighbours.
    """
    token = "T" + text_hash(text)[:20].upper()
    return token, text.replace(token, "[token removed]")


def fenced(text: str, label: str) -> str:
    """``text`` between BEGIN/END marker lines carrying ``label`` and the text's own token."""
    token, safe = fence(text)
    return f"<<<BEGIN {label} {token}>>>\n{safe}\n<<<END {label} {token}>>>"


@lru_cache(maxsize=1)
def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(str(PROMPTS_DIR)), undefined=StrictUndefined,
                      keep_trailing_newline=False, trim_blocks=True, lstrip_blocks=True,
                      autoescape=False)
    env.globals["fenced"] = fenced
    return env


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
