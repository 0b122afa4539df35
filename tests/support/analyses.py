"""A hand-made conversation frame for the analyses (``CONV``, built by ``_conv``), the expected
numbers worked out by hand in the comments. Used by test_analyses and test_paper_figures."""

from __future__ import annotations

import pandas as pd


def _conv(rows):
    return pd.DataFrame(rows, columns=["target", "query_id", "category", "condition", "length",
                                       "n_benign_moves", "turn1_utility", "turn1_harm", "utility", "harm_max"])


CONV = _conv([
    # A/q1: Turn 1 = 0 -> hard refusal; BC 40, 60 -> 50; NC 20; oracle 80
    ("A", "q1", "c1", "BC", 4, 1, 0.0, 1, 40.0, 2),
    ("A", "q1", "c1", "BC", 6, 2, 0.0, 1, 60.0, 4),
    ("A", "q1", "c1", "NC", 4, 0, 0.0, 1, 20.0, 1),
    ("A", "q1", "c1", "oracle", 2, 0, 80.0, 1, 80.0, 1),
    # A/q2: Turn 1 = 30 of oracle 50 -> high (> 25); BC 70, NC 30
    ("A", "q2", "c2", "BC", 4, 1, 30.0, 2, 70.0, 3),
    ("A", "q2", "c2", "NC", 4, 0, 30.0, 2, 30.0, 2),
    ("A", "q2", "c2", "oracle", 2, 0, 50.0, 1, 50.0, 1),
    # B/q1: Turn 1 = 20 of oracle 40 -> partial (exactly 50 %); BC 60, NC 20
    ("B", "q1", "c1", "BC", 4, 1, 20.0, 1, 60.0, 5),
    ("B", "q1", "c1", "NC", 4, 0, 20.0, 1, 20.0, 1),
    ("B", "q1", "c1", "oracle", 2, 0, 40.0, 1, 40.0, 1),
])
