"""Figures drawn once per input: a rerun whose data did not change copies its PNGs instead of
drawing them again (matplotlib takes most of a report's time, and a fully cached rerun should
cost next to nothing).

A figure's key is a hash of its name, the inputs it is drawn from (tables without their row
order), the source of the figure modules and matplotlib's version; the PNG is kept under ``<home>/reports/.figures/``.
Inputs that cannot be pickled are drawn every time. A figure that fails is never kept; one
with nothing to show (``NotDrawn``) keeps its sentence (``<key>.why``), so a rerun says it again
without importing matplotlib."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import pickle
import shutil
from pathlib import Path

import numpy as np

from tasks.benchmarks.carryon.report.not_drawn import NotDrawn


@functools.lru_cache(maxsize=1)
def _code_version() -> str:
    from importlib.metadata import version  # not matplotlib itself: a copied figure needs none

    h = hashlib.sha256(version("matplotlib").encode())
    here = Path(__file__).parent
    for name in ("figures.py", "figures_paper.py", "construction.py", "figure_cache.py",
                 "not_drawn.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()


def canonical(x):
    """A table as its columns, dtypes and the sorted hashes of its rows (floats to 9 decimals):
    the views' rows come in no fixed order, and a figure drawn from them (means, counts per
    group) does not depend on it. Tables whose cells cannot be hashed stay as they are (pickled, order and all)."""
    import pandas as pd

    if isinstance(x, pd.DataFrame):
        # Means over rows in another order differ in their last bits; no figure shows them.
        floats = x.select_dtypes("floating").columns
        if len(floats):
            x = x.assign(**{c: x[c].round(9) for c in floats})
        try:
            rows = np.sort(pd.util.hash_pandas_object(x, index=False).to_numpy())
        except TypeError:
            return x
        return ("DataFrame", tuple(map(str, x.columns)), tuple(map(str, x.dtypes)), rows.tobytes())
    if isinstance(x, (tuple, list)):
        return (type(x).__name__, tuple(canonical(v) for v in x))
    if isinstance(x, dict):  # a Stat's ``extra`` (e.g. the per-query table behind turn1_bins)
        return ("dict", tuple(sorted(((str(k), canonical(v)) for k, v in x.items()),
                                     key=lambda kv: kv[0])))
    if dataclasses.is_dataclass(x) and not isinstance(x, type):  # an analysis Stat and its table
        return (type(x).__name__, tuple((f.name, canonical(getattr(x, f.name)))
                                        for f in dataclasses.fields(x)))
    return x


def figure_key(name: str, inputs) -> str | None:
    try:
        blob = pickle.dumps(canonical(inputs), protocol=4)
    except Exception:  # noqa: BLE001 - an unpicklable input: no reuse, draw it
        return None
    return hashlib.sha256(name.encode() + _code_version().encode() + blob).hexdigest()[:32]


def draw_once(cache_dir: Path, name: str, inputs, draw, path: Path) -> Path:
    """``draw(path)``, or a copy of the PNG drawn before from the same inputs."""
    key = figure_key(name, inputs)
    if key is None:
        return draw(path)
    kept, why = cache_dir / f"{key}.png", cache_dir / f"{key}.why"
    if kept.is_file():
        shutil.copyfile(kept, path)
        return path
    if why.is_file():
        raise NotDrawn(why.read_text(encoding="utf-8"))
    try:
        out = draw(path)
    except NotDrawn as e:
        _keep_text(why, e.why)
        raise
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = kept.with_suffix(f".{os.getpid()}.tmp")
    shutil.copyfile(out, tmp)
    os.replace(tmp, kept)  # whole or not at all, also with two reports at once
    return out


def _keep_text(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only folder: drawn (or not) again next time
