"""A benchmark's items: what its loader reads, which ones a run takes, and their table.

An item carries its *prompts* (the openings a condition may use: ``benign``, ``dual_use``,
``question``, ...), what is *hidden* from the target (an intent, slots, reference answers:
only the simulated user and the judges see it) and *meta* fields the report groups by.
A loader is ``load(path) -> list[Item]`` registered with ``@loader(name, sample=PATH)``
(tasks/core/registry.py; each beside its benchmark's spec), ``sample`` being the
team's sample in the source's own format; every problem in a file raises
``tasks.datasets.fields.DataError`` naming the file, the row and the field.

A loader that reads several sources, told apart by the file's shape, also registers
``source_of`` (an item -> the ``dataset.source`` its file's shape belongs to): a file is then
refused when its shape is another source's than the config names (a PersonaMem-v2 CSV under
``source: nemotron``), so a run is never labelled with a source its data did not come from.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tasks.datasets.fields import DataError
from tasks.core import registry


@dataclass(frozen=True)
class Item:
    item_id: str
    source_row: int
    prompts: dict[str, str]
    hidden: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    def to_row(self, benchmark: str, run_id: str | None = None) -> dict:
        return {"benchmark": benchmark, "item_id": self.item_id, "source_row": self.source_row,
                "prompts": json.dumps(self.prompts, sort_keys=True, ensure_ascii=False),
                "hidden": json.dumps(self.hidden, sort_keys=True, ensure_ascii=False),
                "meta": json.dumps(self.meta, sort_keys=True, ensure_ascii=False),
                "run_id": run_id}

    @classmethod
    def from_row(cls, row: dict) -> "Item":
        return cls(row["item_id"], row["source_row"], json.loads(row["prompts"]),
                   json.loads(row["hidden"]), json.loads(row["meta"]))


def item_id(benchmark: str, *identity: str) -> str:
    """A stable 16-hex id from what identifies an item in its source (never its row number
    alone: a reordered file keeps its ids)."""
    return hashlib.sha256("\x1f".join((benchmark, *identity)).encode()).hexdigest()[:16]


class ItemError(ValueError):
    """What a component needs of an item and this one lacks (a judge's checklist, a user's
    intent): the item's ``field`` and why; ``check_items`` names the file and the row."""

    def __init__(self, field: str, why: str):
        self.field, self.why = field, why
        super().__init__(f"{field}: {why}")


def dataset_file(cfg) -> Path:
    """The file the config's items are read from: the loader's sample (``dataset.source:
    sample``) or the config's ``dataset.path`` (relative to the working folder, else to the
    config file)."""
    spec, ds = cfg.spec, cfg.dataset
    if ds.source == "sample":
        sample = registry.lookup("loader", spec.loader).meta.get("sample")
        if callable(sample):  # a loader whose arguments name the file (records: beside the spec)
            sample = sample(spec.component("loader", spec.loader),
                            Path(spec.source_path).parent if spec.source_path else None)
        if sample is None:
            raise DataError(f"{cfg.source_path or 'config'}: dataset.source: loader "
                            f"{spec.loader} ships no sample; give source and path")
        return Path(sample)
    if not ds.path:
        raise DataError(f"{cfg.source_path or 'config'}: dataset.path: source {ds.source!r} "
                        "needs the path of the file")
    path = Path(ds.path).expanduser()
    if not path.is_absolute() and cfg.source_path and not path.exists():
        path = Path(cfg.source_path).parent / path  # relative to the config file as a fallback
    return path


def load_items(cfg) -> list[Item]:
    """Every item of the config's dataset (the loader's sample or the user's file)."""
    spec = cfg.spec
    path = dataset_file(cfg)
    items = spec.component("loader", spec.loader)(path)
    if cfg.dataset.source == "sample":
        return items
    if not items:
        raise DataError(f"{path}: no items in the file")
    check_source(spec.loader, cfg.dataset.source, path, items)
    return items


def check_source(loader_name: str, source: str, path, items: list[Item]) -> None:
    """The file's shape belongs to ``source`` (when its loader says which source a shape is)."""
    source_of = registry.lookup("loader", loader_name).meta.get("source_of")
    if source_of is None:
        return
    for it in items:
        found = source_of(it)
        if found != source:
            raise DataError(f"{path}: row {it.source_row}: the file is in the shape of source "
                            f"{found!r}, but dataset.source is {source!r}")


def select_items(cfg, limit: int | None = None) -> list[Item]:
    """The items a run uses: file order, the first ``min(dataset.limit, limit)``. A loader
    that selects by more of the config's ``dataset:`` section than its file (CarryOnBench's:
    excluded categories, a minimum safe rate) registers ``select(cfg, limit)``."""
    select = registry.lookup("loader", cfg.spec.loader).meta.get("select")
    rows = select(cfg, limit) if select is not None else load_items(cfg)
    dup = sorted(i for i, n in Counter(r.item_id for r in rows).items() if n > 1)
    if dup:
        first = next(r for r in rows if r.item_id == dup[0])
        raise DataError(f"{cfg.dataset.path or 'sample'}: row {first.source_row}: the item "
                        f"repeats an earlier one (same identity, id {dup[0]})")
    caps = [n for n in (cfg.dataset.limit, limit) if n is not None]
    return rows[: min(caps)] if caps else rows


def check_items(cfg, items: list[Item]) -> None:
    """What the spec's components need of each item (its stages, its user policies under the
    conditions the item opens, its judges), checked before anything is played or planned: DataError
    ``<file>: row N: <field>: <why>``. ``items`` as the prepare stages will leave them (what
    they will build is there: tasks/engine/plan.py ``foreseen_items``)."""
    spec = cfg.spec
    users = [(c, spec.user(c)) for c in spec.conditions]
    judges = [j for _, j in spec.judge_objects()]
    stages = spec.stage_objects()
    for item in items:
        try:
            for stage in stages:
                stage.check_item(spec, item)
            for c, user in users:
                if c.prompt and item.prompts.get(c.prompt):
                    user.check_item(item, c)
            for j in judges:
                j.check_item(item)
        except ItemError as e:
            raise DataError(f"{dataset_file(cfg)}: row {item.source_row}: {e}") from None


def in_shard(key: str, shard_index: int, shard_count: int) -> bool:
    """Whether a work unit (an item or a query, by its hex id) belongs to this shard."""
    return int(key, 16) % shard_count == shard_index


def run_items(ctx) -> list[Item]:
    """The items of this run and shard."""
    return [r for r in select_items(ctx.config, ctx.limit)
            if in_shard(r.item_id, ctx.shard_index, ctx.shard_count)]


def prepare_items(ctx, items: list[Item], until: str | None = None
                  ) -> tuple[list[Item], dict[str, str]]:
    """The items as the spec's prepare stages left them (those before the stage ``until``,
    when given): each stage's ``prepared(ctx, items) -> (items, {item_id: reason})`` keeps
    the items it prepared, with what it built added (the checklists stage: each item's
    checklist), and says why it left out the others. Play and judging read items through
    this."""
    left: dict[str, str] = {}
    for stage in ctx.config.spec.stage_objects():
        if stage.name == until:
            break
        if stage.phase == "prepare":
            items, out = stage.prepared(ctx, items)
            left.update(out)
    return items, left


def store_items(wh, benchmark: str, items: list[Item], run_id: str | None = None) -> int:
    return wh.write("bench_items", [i.to_row(benchmark, run_id) for i in items])


def stored_items(wh, benchmark: str, item_ids) -> dict[str, Item]:
    """item_id -> Item, as the episodes stage stored them in ``bench_items``."""
    rows = wh.query("SELECT * FROM bench_items WHERE benchmark = ? AND list_contains(?, item_id)",
                    [benchmark, sorted(set(item_ids))])
    return {r["item_id"]: Item.from_row(r) for r in rows}
