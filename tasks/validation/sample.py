"""Stratified, seeded samples for human validation, stored in the warehouse: each kind draws
its units (tasks/validation/kinds/, or a benchmark's own kind: CarryOnBench's naturalness), and
the annotators are assigned here. A pooled kind gives each unit to ``n_annotators``
annotators of a pool sized so each gets about ``per_annotator`` (12) units, balanced by length
and shuffled within each assignment; every other kind has every annotator label every unit.

Randomness comes from ``random.Random`` seeded with a stable hash of (kind, seed), so the same
warehouse and seed give the same sample.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random

from tasks.validation import ValidationError
from tasks.validation.report import kind_of
from warehouse.schema import ValidationAnnotation, ValidationAssignment, ValidationSample, ValidationUnit


def _rng(kind: str, seed: int) -> random.Random:
    d = hashlib.sha256(f"carryon-validation|{kind}|{seed}".encode()).digest()
    return random.Random(int.from_bytes(d[:8], "big"))


def _annotator(i: int) -> str:
    return f"a{i + 1:02d}"


def assign_pool(units: list[dict], rng: random.Random, n_annotators: int, per_annotator: int = 12
                ) -> tuple[dict[str, list[str]], list[str]]:
    """Each unit to ``n_annotators`` distinct annotators; a pool of about
    units * n_annotators / per_annotator annotators; balanced by length (units are dealt in
    length order to the least-loaded annotators); each assignment shuffled."""
    n = len(units)
    pool = max(n_annotators, round(n * n_annotators / per_annotator)) if n else n_annotators
    load = {_annotator(i): [] for i in range(pool)}
    names = list(load)
    # Deal the slots (unit j's copies are slots j*r .. j*r+r-1) cyclically over the pool, units
    # in length order (shuffled within a length): a unit's r consecutive slots go to r distinct
    # annotators, and every length's contiguous block of slots gives each annotator its count
    # or one more, so assignments are balanced in size and by length.
    ordered = sorted(units, key=lambda u: (u.get("length", 0), rng.random()))
    for j, u in enumerate(ordered):
        for k in range(n_annotators):
            load[names[(j * n_annotators + k) % pool]].append(u["unit_id"])
    for a in load:
        rng.shuffle(load[a])
    sizes = sorted(len(v) for v in load.values())
    notes = [f"{pool} annotators, {n_annotators} per conversation, "
             f"{sizes[0]}-{sizes[-1]} conversations each" if sizes else "no annotators"]
    if n and n * n_annotators / pool < 11:
        notes.append("fewer than 11-13 conversations per annotator: scaled down with the sample")
    return load, notes


def draw_sample(wh, kind: str, seed: int = 0, n_annotators: int = 3, *, spec=None,
                per_annotator: int = 12, **options) -> dict:
    """Draw a sample of ``spec``'s run (default: the default benchmark's), store it
    (replacing an earlier one of the same kind and seed, with its imported annotations) and
    return {sample_id, n_units, assignments, notes}. ``options`` are the kind's own
    (``pairs``, ``per_score``, ``scripts_per_length``, ...)."""
    if spec is None:
        from tasks.bench import default_benchmark, load_spec

        spec = load_spec(default_benchmark())
    vk = kind_of(kind)
    vk.check_annotators(n_annotators)
    if n_annotators < 1:
        raise ValidationError("--annotators: must be at least 1")
    rng = _rng(kind, seed)
    units, notes = vk.draw(wh, spec, rng, options)
    if vk.pooled:
        assignments, n2 = assign_pool(units, rng, n_annotators, per_annotator)
        notes += n2
    else:
        assignments = {}
        for i in range(n_annotators):
            ids = [u["unit_id"] for u in units]
            rng.shuffle(ids)
            assignments[_annotator(i)] = ids
        notes.append(f"{n_annotators} annotators, each labels all {len(units)} units")
    if not units:
        raise ValidationError(f"the warehouse has nothing to sample for {kind} ({vk.empty(wh, spec)})")
    sample_id = f"{kind}-{seed}"
    params = {"flows_per_length": options.get("scripts_per_length", 30),  # the name it was stored under
              "per_annotator": per_annotator, "pairs": options.get("pairs", 25),
              "per_score": options.get("per_score", 20), "benchmark": spec.name, "notes": notes}
    where = ("sample_id = ?", [sample_id])
    wh.write_many([
        (ValidationAnnotation, [], where),
        (ValidationAssignment, [{"sample_id": sample_id, "annotator": a, "unit_id": u, "shown_order": k}
                                for a, ids in assignments.items() for k, u in enumerate(ids)], where),
        (ValidationUnit, [{"sample_id": sample_id, "unit_id": u["unit_id"], "conversation_id": u["conversation_id"],
                           "conversation_id_b": u.get("conversation_id_b"), "position": u.get("position"),
                           "stratum": u["stratum"], "judge_score": u.get("judge_score")} for u in units], where),
        (ValidationSample, [{"sample_id": sample_id, "kind": kind, "seed": seed, "n_annotators": n_annotators,
                             "params": json.dumps(params), "created": dt.datetime.now(dt.timezone.utc)}], where),
    ])
    return {"sample_id": sample_id, "n_units": len(units),
            "assignments": {a: len(v) for a, v in assignments.items()}, "notes": notes}


def latest_sample(wh, kind: str) -> str:
    rows = wh.query("SELECT sample_id FROM validation_samples WHERE kind = ? ORDER BY created DESC LIMIT 1", [kind])
    if not rows:
        raise ValidationError(f"no {kind} sample yet: run `carryon validate sample --kind {kind}` first")
    return rows[0]["sample_id"]
