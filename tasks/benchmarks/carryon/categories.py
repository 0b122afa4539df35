"""SORRY-Bench's 45 categories: ids, canonical names, the four domains, and the spellings the
published files use.

SORRY-Bench (2024-06) numbers its categories 1..45 and groups them into four domains (the
paper's per-domain analysis uses them): 1-5 Hate Speech Generation, 6-25 Assistance with
Crimes or Torts, 26-40 Potentially Inappropriate Topics, 41-45 Potentially Unqualified Advice.

CASE-Bench labels its rows with lower-case category strings that mostly match SORRY-Bench's
names, with the upstream file's own spellings for eight of them (typos included, e.g.
``secual crimes``). ``ALIASES`` maps every spelling we know — the canonical names and the
published CASE-Bench strings — to the category id. An unknown string is still an error (the
loaders name the row and the value): it is far more often a corrupted or wrong file than a new
category, and silently mapping it would move a query between domains.
"""

from __future__ import annotations

from dataclasses import dataclass

# Canonical names: SORRY-Bench's category names in lower case, without their parenthesised
# examples; index + 1 = the SORRY-Bench id.
_NAMES = [
    "personal insulting words",
    "social-group insulting words",
    "threatening words",
    "lewd and obscene words",
    "libelous words",
    "self-harm",
    "violent crimes",
    "harassment",
    "sexual crimes",
    "property crimes",
    "public order crimes",
    "impersonation",
    "general advice for system intrusion",
    "malware code generation",
    "fraud, scams, and deception",
    "financial crimes",
    "intellectual property infringement",
    "personal identifiable information violations",
    "illegal crafting, manufacturing, and distribution",
    "terrorism",
    "child-related crimes",
    "animal-related crimes",
    "environmental crimes",
    "evasion of law enforcement",
    "human elimination & world domination",
    "advice on adult content",
    "sexual explicit content generation",
    "non-sexual explicit content generation",
    "fake news generation",
    "false advertising",
    "advice on discrimination behaviors",
    "military use",
    "political belief promotion",
    "ethical belief promotion",
    "religion promotion",
    "social stereotype promotion",
    "extremist content promotion",
    "conspiracy theories promotion",
    "false common knowledge promotion",
    "harmful & unhealthy behaviors promotion",
    "medical advice",
    "financial advice",
    "legal consulting advice",
    "governance decision advice",
    "dangerous machinery operation advice",
]

# (first id, last id, domain), SORRY-Bench's grouping.
DOMAINS: list[tuple[int, int, str]] = [
    (1, 5, "Hate Speech Generation"),
    (6, 25, "Assistance with Crimes or Torts"),
    (26, 40, "Potentially Inappropriate Topics"),
    (41, 45, "Potentially Unqualified Advice"),
]
DOMAIN_NAMES: list[str] = [d for _, _, d in DOMAINS]


@dataclass(frozen=True)
class Category:
    id: int  # SORRY-Bench id, 1..45
    name: str  # canonical name (lower case)
    domain: str  # one of DOMAIN_NAMES


def _domain(cid: int) -> str:
    return next(d for lo, hi, d in DOMAINS if lo <= cid <= hi)


CATEGORIES: dict[int, Category] = {i + 1: Category(i + 1, n, _domain(i + 1)) for i, n in enumerate(_NAMES)}

# CASE-Bench's published spellings that differ from the canonical names (the file at
# github.com/BriansIDP/CASEBench, data/CASEBench_data.json; its other 37 strings are the
# canonical names). Kept exactly as published, typos included.
_CASEBENCH_SPELLINGS: dict[str, int] = {
    "secual crimes": 9,
    "fraud, scams and deception": 15,
    "stalking and harassment": 8,
    "personal identifiable information": 18,
    "illegal crafting, manufacturing and distribution": 19,
    "human elimination and world domination": 25,
    "harmful and unhealthy behaviour promotion": 40,
    "advice on discirmination behaviours": 31,
}

ALIASES: dict[str, int] = {c.name: c.id for c in CATEGORIES.values()} | _CASEBENCH_SPELLINGS


def lookup(value: str) -> Category | None:
    """The category a published string, a canonical name or an id ("12", 12) names, or None.

    Exact match on the lower-cased, whitespace-trimmed string: spellings are data, not
    something to guess at."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return CATEGORIES.get(value)
    if not isinstance(value, str):
        return None
    key = value.strip().lower()
    if key.isdigit():
        return CATEGORIES.get(int(key))
    cid = ALIASES.get(key)
    return CATEGORIES[cid] if cid is not None else None
