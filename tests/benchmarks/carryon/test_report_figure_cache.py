"""The report's figure cache: a figure is drawn once per input and code version, copied after."""

from __future__ import annotations

import pandas as pd
import pytest

from tasks.benchmarks.carryon.report.figure_cache import draw_once


def changed_rows(data: pd.DataFrame) -> pd.DataFrame:
    return data.assign(bc_utility=data["bc_utility"] + 0.5)


def test_a_figure_is_drawn_once_per_input(tmp_path):
    drawn = []

    def draw(path):
        drawn.append(path)
        path.write_bytes(b"png of " + str(len(drawn)).encode())
        return path

    cache = tmp_path / ".figures"
    data = pd.DataFrame({"target": ["a", "b"], "bc_utility": [40.0, 55.5]})
    first = draw_once(cache, "f.png", (data, 4), draw, tmp_path / "r1.png")
    again = draw_once(cache, "f.png", (data.copy(), 4), draw, tmp_path / "r2.png")
    assert len(drawn) == 1 and again.read_bytes() == first.read_bytes() == b"png of 1"
    # The same rows in another order (a view's SELECT has no ORDER BY): the same figure.
    draw_once(cache, "f.png", (data.iloc[::-1], 4), draw, tmp_path / "r0.png")
    assert len(drawn) == 1
    # Also inside an analysis result (a dataclass holding a table).
    from tasks.benchmarks.carryon.report.analyses import Stat

    draw_once(cache, "s.png", Stat("t", data), draw, tmp_path / "s1.png")
    draw_once(cache, "s.png", Stat("t", data.iloc[::-1]), draw, tmp_path / "s2.png")
    assert len(drawn) == 2
    # And in a Stat's ``extra`` dict (turn1_bins keeps its per-query table there): a warm
    # rerun's table in another row order redrew that figure every time.
    draw_once(cache, "x.png", Stat("t", data, extra={"per_query": data}), draw, tmp_path / "x1.png")
    draw_once(cache, "x.png", Stat("t", data, extra={"per_query": data.iloc[::-1]}), draw,
              tmp_path / "x2.png")
    assert len(drawn) == 3
    draw_once(cache, "x.png", Stat("t", data, extra={"per_query": changed_rows(data)}), draw,
              tmp_path / "x3.png")
    assert len(drawn) == 4
    del drawn[2:]
    drawn.pop()
    # Another input, another parameter or another figure name: drawn again.
    changed = data.assign(bc_utility=[40.0, 55.6])
    draw_once(cache, "f.png", (changed, 4), draw, tmp_path / "r3.png")
    draw_once(cache, "f.png", (data, 5), draw, tmp_path / "r4.png")
    draw_once(cache, "g.png", (data, 4), draw, tmp_path / "r5.png")
    assert len(drawn) == 4
    assert (tmp_path / "r3.png").read_bytes() == b"png of 2"


def test_a_failed_or_unpicklable_figure_is_never_kept(tmp_path):
    cache = tmp_path / ".figures"

    def broken(path):
        raise ValueError("no data")

    with pytest.raises(ValueError):
        draw_once(cache, "f.png", ("x",), broken, tmp_path / "a.png")
    assert not cache.exists() or not list(cache.iterdir())
    calls = []

    def draw(path):
        calls.append(1)
        path.write_bytes(b"x")
        return path

    for name in ("b.png", "c.png"):
        draw_once(cache, "f.png", (lambda: None,), draw, tmp_path / name)  # lambdas do not pickle
    assert len(calls) == 2
