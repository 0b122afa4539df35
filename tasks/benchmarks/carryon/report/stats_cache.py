"""The report's statistics computed once per input, as its figures are (figure_cache.py): a
rerun whose data did not change reads them back instead of fitting the mixed models and
bootstrapping the intervals again, and so never imports scipy or statsmodels.

The key hashes everything the statistics are computed from: the report's data without its run
row and the sections the caller leaves out (every table without its row order, floats to 9
decimals, as for the figures; the run's config included), the failure rules, the source of
every module of the ``tasks`` package and its YAML files (the paper's numbers the report is
compared with among them) and the versions of the numerical libraries. A change to
any of them is a new key, so a kept statistic is never read for other inputs. The report leaves
out the sections that count the run's own calls (its requests, reasoning tokens and blocked
answers: writer.PER_RUN_SECTIONS), which a rerun changes: their statistics are computed on
every report (they are cheap) and are not in the kept set. A set that holds a statistic that
failed ("Not computed" after an error) is never kept: the next report tries again.
Kept under ``<home>/reports/.stats/``."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import pickle
from pathlib import Path

from tasks.benchmarks.carryon.report.figure_cache import canonical

log = logging.getLogger(__name__)

_LIBRARIES = ("numpy", "pandas", "scipy", "statsmodels")


@functools.lru_cache(maxsize=1)
def _code_version() -> str:
    from importlib.metadata import version

    h = hashlib.sha256(" ".join(f"{n} {version(n)}" for n in _LIBRARIES).encode())
    package = Path(__file__).resolve().parents[3]  # tasks/: analyses read its tables' helpers
    # Its YAML too: the paper's published numbers (benchmarks/carryon/paper.yaml) are an input.
    for path in sorted([*package.rglob("*.py"), *package.rglob("*.yaml")]):
        h.update(str(path.relative_to(package)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def stats_key(data, rules, leave_out: tuple[str, ...] = ()) -> str | None:
    """The key of the statistics of ``data`` (a ReportData) under ``rules``, without the
    sections of ``data.extra`` named in ``leave_out`` (those the kept statistics do not read);
    None: not keyable."""
    fields = {f.name: getattr(data, f.name) for f in dataclasses.fields(data) if f.name != "run"}
    if leave_out and isinstance(fields.get("extra"), dict):
        fields["extra"] = {k: v for k, v in fields["extra"].items() if k not in leave_out}
    try:
        blob = pickle.dumps((canonical(fields), canonical(rules)), protocol=4)
    except Exception:  # noqa: BLE001 - an unpicklable input: compute, keep nothing
        return None
    return hashlib.sha256(_code_version().encode() + blob).hexdigest()[:32]


def stats_once(cache_dir: Path, data, rules, compute, failed,
               leave_out: tuple[str, ...] = ()) -> list:
    """``compute()``, or the statistics computed before from the same inputs. ``failed(stats)``
    says whether a set holds a failed statistic (such a set is not kept); ``leave_out``: as for
    ``stats_key`` (``compute`` must not read those sections)."""
    key = stats_key(data, rules, leave_out)
    if key is None:
        return compute()
    kept = cache_dir / f"{key}.pkl"
    if kept.exists():
        try:
            return pickle.loads(kept.read_bytes())
        except Exception:  # noqa: BLE001 - a torn or foreign file: compute again
            log.warning("unreadable kept statistics %s: computing them again", kept)
    stats = compute()
    if failed(stats):
        return stats
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(stats, protocol=4))
        os.replace(tmp, kept)  # whole or not at all, also with two reports at once
    except OSError:
        pass  # a read-only reports folder: nothing kept, the report is still whole
    return stats
