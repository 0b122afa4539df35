"""Prompt tokens per call for ``carryon plan``, from the prompts and the conversations' shape
rather than fixed guesses.

The plan used one rough prompt size per role (tasks/roles.py). Two of them were far off:
the judges' templates had grown (Ben-Util's fixed text is ~530 tokens, safety's ~770, against
350 and 450 assumed), and a simulation call's prompt grows with its turn depth, which a flat
"two answers of history" does not follow. Here:

- a judge's prompt is its template rendered with one-character fields (measured, so a
  template edit moves the plan with it), plus the query, the judged response and the item
  (CarryOnBench's plan measures its two judges' so, beside its spec);
- a target's or simulated user's prompt is the opening plus the turns before it (CarryOnBench's
  sums them over the calls its prefix tree makes: tasks/benchmarks/carryon/simulate_plan.py);
- a query's length is the selected queries' own (characters / 4), not a constant.

Answers are assumed to use half their ``max_tokens`` (the plan's stated assumption); with
that, the plan is within a quarter of a run's calls and prompt tokens
(tests/engine/test_plan_accuracy.py).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from jinja2 import TemplateNotFound

import prompts
from prompts import CHARS_PER_TOKEN

# Per message, the chat format's own tokens (role, separators).
MESSAGE_TOKENS = 4


def text_tokens(text: str) -> float:
    return len(text or "") / CHARS_PER_TOKEN


_TAG = re.compile(r"\{#.*?#\}|\{%.*?%\}|\{\{.*?\}\}", re.S)


def template_tokens(name: str | None) -> float | None:
    """A prompt template's own text in tokens (its Jinja tags left out: the fields are counted
    separately); None when the role names no single template file. The file is the one a run
    of the benchmark under way would render (its own prompts/ first)."""
    if not name or "*" in name:
        return None
    try:
        return _file_tokens(str(prompts.template_path(name)))
    except (OSError, TemplateNotFound):
        return None


@functools.lru_cache(maxsize=64)
def _file_tokens(path: str) -> float:
    return len(_TAG.sub("", Path(path).read_text(encoding="utf-8"))) / CHARS_PER_TOKEN


def episode_prompts(turns: list[int], opening: float, answer: float, user: float) -> float:
    """Mean prompt tokens of a target call over episodes of ``turns`` target turns each: the
    opening prompt, plus every earlier answer and user reply."""
    calls = sum(turns)
    if not calls:
        return opening
    history = sum(n * (n - 1) / 2 for n in turns) * (answer + user + 2 * MESSAGE_TOKENS)
    return opening + history / calls


def recorded_tokens(cfg) -> dict[str, tuple[int, float, float, float | None]]:
    """Per role, the calls recorded in the config's home (``llm_calls``: requests sent, not
    cache hits), their mean prompt and completion tokens and the share of their prompt tokens
    the provider reported as read from its prompt cache (``cached_tokens``): a pilot run
    (``--limit``) calibrates the plan's tokens per call, and its cached column, to what the
    providers did."""
    path = cfg.home_path / "warehouse.duckdb"
    if not path.exists():
        return {}
    try:
        from warehouse import Warehouse

        rows = Warehouse(path).query(
            "SELECT role, count(*) AS n, avg(prompt_tokens) AS p, avg(completion_tokens) AS c, "
            "sum(coalesce(cached_tokens, 0)) / nullif(sum(prompt_tokens), 0) AS cached "
            "FROM llm_calls WHERE NOT cache_hit GROUP BY role")
    except Exception:  # noqa: BLE001 - a home another process holds: the estimates
        return {}
    return {r["role"]: (r["n"], float(r["p"] or 0), float(r["c"] or 0),
                        None if r["cached"] is None else float(r["cached"]))
            for r in rows if r["n"]}
