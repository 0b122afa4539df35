"""Every prompt is a Jinja2 template, found by name; ``render`` is the only way to use one.

Templates are rendered with StrictUndefined, so a missing variable is an error rather than an
empty string in a prompt. ``template_version`` hashes template sources: judgment sets record
it, and the gateway's cache key already contains the rendered text, so editing a template
re-runs exactly the calls whose prompt changed.

Model-written text (a target's answer, a simulated user's turn, a construction model's
answer or checklist) is untrusted wherever a prompt shows it: templates write it as
``{{ fenced(text, "LABEL") }}``, a block between two marker lines whose token is derived
from a hash of the text (``fence``), so the text cannot close its own block
or pass itself off as another turn; the template says that a fenced block is data.

Where a template lives, and its name (docs/ARCHITECTURE.md, "Prompt templates"):

- shared templates are here, one folder per kind of component that renders them
  (``judges/``, ``users/``; ``_data_rule.j2`` is a sentence all kinds include); a shared
  template's name is its path here: ``judges/benutil.j2``;
- a built-in benchmark's own templates are in ``prompts/`` beside its spec, mounted under the
  benchmark's name by its package (``mount``): ``eyt/final.j2`` is
  ``tasks/benchmarks/eyt/prompts/final.j2``;
- while a benchmark runs or plans (``benchmark_prompts``: every stage of a run, the plan), the
  ``prompts/`` folder beside its spec is searched first, for every name: a benchmark kept
  outside the project ships its own templates there, and a file there named like a shared
  template replaces it for that benchmark only.

A name never changes once a run has used it: the gateway's cache keys hold the rendered text,
and verdict and judgment set ids hold ``template_version``, which hashes a template's name
and source. A template that moved keeps its first name in ``FIRST_NAMES``: its version hashes
that name, and the first name still finds the file (a template's source, its ``include``
lines too, is kept byte for byte, so those lines still say the first names).
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path

from jinja2 import BaseLoader, Environment, StrictUndefined, TemplateNotFound

PROMPTS_DIR = Path(__file__).parent
# A rendered prompt's size in tokens, estimated as characters / 4 (English prose): the plan's
# token counts and the judges' cache-prefix layout use this one ratio.
CHARS_PER_TOKEN = 4

# Current name -> the name the template had when runs first used it (before it moved). Its
# version hashes the first name; the first name also still finds the file. Add a line here
# when a template moves; never edit or remove one while the template has that current name
# (homes written before hold those hashes). A template that moves back to its first name
# needs no line, and the line of the name it leaves goes.
FIRST_NAMES = {
    "judges/_fenced.j2": "judge/_fenced.j2",
    "judges/benutil.j2": "judge/benutil.j2",
    "judges/safety.j2": "judge/safety.j2",
    **{f"users/{n}.j2": f"user/{n}.j2" for n in (
        "_context", "_context_no_intent", "_history", "_requirements", "backchannel",
        "benign_justification", "benign_reasking", "context_switching", "delaying",
        "move_check", "pushback", "reactive", "rephrasing")},
    "carryon/intent.j2": "intent.j2",
    "carryon/oracle.j2": "oracle.j2",
}
# (CarryOnBench's checklist templates lived in its folder as carryon/checklists/<n>.j2 for a
# while; the checklists stage any benchmark names renders them again from their first names,
# prompts/checklists/<n>.j2, so they need no line: their versions hash those names as always.)
_MOVED_TO = {first: now for now, first in FIRST_NAMES.items()}

# Benchmark name -> its own templates folder (``mount``).
_MOUNTS: dict[str, Path] = {}
# The prompts/ folder beside the spec of the benchmark under way (``benchmark_prompts``). A
# context variable, not a global: tests and servers open several benchmarks in one process,
# and a value set inside a run's flow stays with that flow's tasks.
_BENCHMARK: ContextVar[Path | None] = ContextVar("benchmark_prompts", default=None)


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


def mount(benchmark: str, folder: Path) -> None:
    """Make ``folder`` (a built-in benchmark's own prompts/) the templates named
    ``<benchmark>/<path in folder>``; the benchmark's package calls it on import, so its
    templates are found wherever its code runs (a run, a plan, a unit test)."""
    if (PROMPTS_DIR / benchmark).is_dir():
        raise ValueError(f"prompts.mount: {benchmark!r} is a shared folder's name")
    _MOUNTS[benchmark] = Path(folder)


@contextmanager
def benchmark_prompts(folder: Path | None):
    """Search ``folder`` (the prompts/ beside a benchmark's spec) before every other place while
    the block runs; no folder (or none on disk): the shared templates only."""
    token = _BENCHMARK.set(Path(folder) if folder is not None and Path(folder).is_dir() else None)
    try:
        yield
    finally:
        _BENCHMARK.reset(token)


def first_name(name: str) -> str:
    """The name a template's version hashes: the one it had when runs first used it."""
    now = _MOVED_TO.get(name, name)
    return FIRST_NAMES.get(now, now)


def _find(name: str, own: Path | None) -> Path:
    # One search for rendering, versions and the plan's token estimates alike.
    name = _MOVED_TO.get(name, name)
    places = [own / name] if own is not None else []
    places.append(PROMPTS_DIR / name)
    head, _, rest = name.partition("/")
    if head in _MOUNTS:
        places.append(_MOUNTS[head] / rest)
    for path in places:
        if path.is_file():
            return path
    raise TemplateNotFound(name)


def template_path(name: str) -> Path:
    """The file the template ``name`` is read from here and now."""
    return _find(name, _BENCHMARK.get())


def template_names() -> list[str]:
    """Every template's current name: the shared ones and those of every mounted folder."""
    names = [str(p.relative_to(PROMPTS_DIR)) for p in PROMPTS_DIR.rglob("*.j2")]
    for benchmark, folder in _MOUNTS.items():
        names += [f"{benchmark}/{p.relative_to(folder)}" for p in folder.rglob("*.j2")]
    return sorted(names)


class _Loader(BaseLoader):
    """Jinja's loader over ``_find``: the benchmark's folder (if any), the shared folder, the
    mounted folders. An include inside a template is looked up the same way."""

    def __init__(self, own: Path | None):
        self.own = own

    def get_source(self, environment, template):
        path = _find(template, self.own)
        mtime = path.stat().st_mtime
        # Text mode, as Jinja's FileSystemLoader reads: the same characters, so the same prompt.
        source = path.read_text(encoding="utf-8")
        return source, str(path), lambda: path.is_file() and path.stat().st_mtime == mtime


@lru_cache(maxsize=None)
def _env(own: Path | None = None) -> Environment:
    # One environment per benchmark folder: Jinja caches a template by its name, and a name
    # may mean another file for another benchmark.
    env = Environment(loader=_Loader(own), undefined=StrictUndefined,
                      keep_trailing_newline=False, trim_blocks=True, lstrip_blocks=True,
                      autoescape=False)
    env.globals["fenced"] = fenced
    return env


def render(name: str, **context) -> str:
    """Render the template ``name`` (e.g. ``"judges/benutil.j2"``) and strip outer whitespace."""
    return _env(_BENCHMARK.get()).get_template(name).render(**context).strip()


def template_version(*names: str) -> str:
    """A short hash of the named templates: each one's first name and its source. A partial
    a template includes counts only when named too (the judges name their fence piece)."""
    h = hashlib.sha256()
    for name in names:
        h.update(first_name(name).encode())
        h.update(template_path(name).read_bytes())
    return h.hexdigest()[:12]
