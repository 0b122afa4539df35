"""litellm's local price map, read from its package files without importing litellm.

Importing litellm costs seconds of CPU (2.8 s of import time on an idle 2-core machine, 5-8 s
loaded), and ``carryon plan`` needs nothing of it but a few rates from the price map it ships
(``model_prices_and_context_window_backup.json``, what ``LITELLM_LOCAL_MODEL_COST_MAP=True``
makes it read). ``lookup(model)`` answers from that file, or says it cannot be sure (None)
and the caller asks litellm itself (tasks/gateway/prices.py).

It answers only where litellm's own lookup (``get_model_info``: litellm/utils.py,
``get_model_info_helper``) cannot answer differently, for the providers in ``PROVIDERS``
(model strings ``provider/name``):

- a hit: the map has the whole string or the name after the provider, compared without case
  as litellm does, with that provider (litellm tries exactly these two first); its input and
  output rates, 0 where the entry has none (as litellm reads them); not when a "fill
  missing" rule of the map's ``fallback_generalizations`` would add a rate it lacks;
- a miss: neither is in the map, no key of the map is a prefix of either (litellm next tries
  the name with a dated or version suffix stripped, which leaves such a prefix), and no
  capability rule of ``fallback_generalizations`` matches either (it could carry prices).

Anything else is None. tests/gateway/test_price_map.py holds it to litellm's answer for every
entry of these providers and every model string of the shipped configs.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from pathlib import Path

FILE = "model_prices_and_context_window_backup.json"
RATE_KEYS = ("input_cost_per_token", "output_cost_per_token", "cache_read_input_token_cost")
# Providers whose lookup in litellm 1.110.2 is the map's keys alone (no provider code asked
# first, no routing of their names): the test checks every entry of each.
PROVIDERS = frozenset({"openai", "anthropic", "gemini", "together_ai", "text-completion-openai"})


def map_path() -> Path | None:
    """litellm's bundled price map, found without importing the package."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / FILE
    return path if path.is_file() else None


@functools.lru_cache(maxsize=1)
def _book() -> tuple[dict, dict, list, list] | None:
    """(entries, lower-case key -> keys, capability patterns, fill-missing (pattern,
    providers, fields)); None when the file is missing or unreadable."""
    path = map_path()
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    rules = doc.pop("fallback_generalizations", None) or {}
    doc.pop("sample_spec", None)
    entries = {k: v for k, v in doc.items() if isinstance(v, dict)}
    lower: dict[str, list[str]] = {}
    for k in entries:
        lower.setdefault(k.lower(), []).append(k)
    capability, fill = [], []
    for rule in rules.get("rules", []) if isinstance(rules, dict) else []:
        info = rule.get("model_info") or {}
        try:
            pattern = re.compile(rule.get("pattern", ""), re.IGNORECASE)
        except re.error:
            continue
        if set(info) == {"litellm_provider"}:
            continue  # a routing rule: names a provider, never a price
        capability.append(pattern)
        if rule.get("fill_missing_for_providers"):
            fill.append((pattern, tuple(rule["fill_missing_for_providers"]), set(info)))
    return entries, lower, capability, fill


def lookup(model: str) -> dict | None:
    """litellm's rates of ``model`` (``RATE_KEYS`` it has), ``{}`` when litellm has none; None
    when this module cannot be sure (ask litellm)."""
    provider, sep, name = model.partition("/")
    if not sep or provider not in PROVIDERS or not name:
        return None
    book = _book()
    if book is None:
        return None
    entries, lower, capability, fill = book
    candidates = (model, name)
    for cand in candidates:
        keys = lower.get(cand.lower(), [])
        if len(keys) > 1:
            return None  # two keys differ only by case: which one litellm finds is its own
        if not keys:
            continue
        info = entries[keys[0]]
        if info.get("litellm_provider") not in (None, provider):
            return None  # litellm would go on to other names
        missing = {k for k in RATE_KEYS if info.get(k) is None}
        if any(provider in provs and fields & missing and p.search(keys[0])
               for p, provs, fields in fill):
            return None  # a rule would fill in a rate the entry lacks
        # litellm reads a missing input or output rate as 0 (get_model_info_helper).
        out = {k: info.get(k) or 0 for k in RATE_KEYS[:2]}
        if info.get(RATE_KEYS[2]) is not None:
            out[RATE_KEYS[2]] = info[RATE_KEYS[2]]
        return out
    low = [c.lower() for c in candidates]
    if any(c.startswith(k) for k in lower for c in low):
        return None  # a shorter key: litellm's stripped names might find it
    if any(p.search(c) for p in capability for c in candidates):
        return None
    return {}
