"""Hostile text of any length (``hostile_line``: one line of mixed scripts, emoji and markup).
Used by test_untrusted and test_hostile_target."""

from __future__ import annotations

import random

MB = 1_000_000


def hostile_line(n: int = MB, seed: int = 0) -> str:
    """One line of mixed scripts, emoji and markup: the slowest text for a browser to lay out."""
    rng = random.Random(seed)
    alphabet = ["a", "é", "ب", "😀", "中", " ", "-", "<", ">", "</script>", "&amp;"]
    out, size = [], 0
    while size < n:
        piece = rng.choice(alphabet)
        out.append(piece)
        size += len(piece)
    return "".join(out)[:n]
