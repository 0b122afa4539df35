"""Stratified, seeded samples for human validation, stored in the warehouse.

naturalness (App. A.4): every distinct 4-turn script plus ``scripts_per_length`` (30) scripts per
longer length, split 2:1 BC:NC as the simulation allocates them (a class with too few
distinct scripts leaves its share to the other); one completed conversation
per script, the target chosen round-robin; ``n_annotators`` (3) annotators per conversation from
a pool sized so each annotator gets about ``per_annotator`` (12, i.e. 11-13) conversations,
balanced by length, shuffled within each assignment. With fewer scripts than that in the run,
everything available is taken and the notes say so.

benutil (B.3.1): ``pairs`` (25) pairs of completed conversations that start from the same query
and differ in length, script (moves) and target; at most one pair per query while queries last.
Every annotator labels every pair.

safety (B.1): assistant turns stratified by the judge's score 1..5, ``per_score`` (20) turns per
score (fewer when a score has fewer turns, noted). Every annotator labels every turn.

Randomness comes from ``random.Random`` seeded with a stable hash of (kind, seed), so the same
warehouse and seed give the same sample.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
from collections import defaultdict

from tasks.validation import KINDS, ValidationError
from warehouse.schema import ValidationAnnotation, ValidationAssignment, ValidationSample, ValidationUnit

_CONVS = """
SELECT conversation_id, target, query_id, flow_id, condition, length
FROM conversations WHERE status = 'completed' AND condition IN ('BC', 'NC')
ORDER BY conversation_id"""


def _rng(kind: str, seed: int) -> random.Random:
    d = hashlib.sha256(f"carryon-validation|{kind}|{seed}".encode()).digest()
    return random.Random(int.from_bytes(d[:8], "big"))


def _annotator(i: int) -> str:
    return f"a{i + 1:02d}"


def draw_naturalness(convs: list[dict], rng: random.Random, scripts_per_length: int = 30
                     ) -> tuple[list[dict], list[str]]:
    notes: list[str] = []
    scripts: dict[int, dict[str, list[str]]] = defaultdict(lambda: {"BC": [], "NC": []})
    by_script: dict[tuple, list[dict]] = defaultdict(list)
    for c in convs:
        key = (c["length"], c["condition"], c["flow_id"])
        if not by_script[key]:
            scripts[c["length"]][c["condition"]].append(c["flow_id"])
        by_script[key].append(c)
    chosen: list[tuple] = []
    for length in sorted(scripts):
        pools = {k: sorted(v) for k, v in scripts[length].items()}
        if length == 4:
            picked = [(length, k, f) for k in ("BC", "NC") for f in pools[k]]
            notes.append(f"length 4: all {len(picked)} distinct scripts in the run")
        else:
            want_bc = round(scripts_per_length * 2 / 3)
            want_nc = scripts_per_length - want_bc
            # 2:1 BC:NC; a class with too few scripts leaves its share to the other (length 6
            # has only 8 valid NC scripts, so full scale there is 22 BC + 8 NC).
            n_nc = min(want_nc, len(pools["NC"]))
            n_bc = min(len(pools["BC"]), scripts_per_length - n_nc)
            n_nc = min(len(pools["NC"]), scripts_per_length - n_bc)
            picked = [(length, "BC", f) for f in rng.sample(pools["BC"], n_bc)] + \
                     [(length, "NC", f) for f in rng.sample(pools["NC"], n_nc)]
            if n_bc + n_nc < scripts_per_length:  # the run has fewer scripts than the design
                notes.append(f"length {length}: scaled down to {n_bc} BC + {n_nc} NC scripts "
                             f"(the run has {len(pools['BC'])} BC and {len(pools['NC'])} NC distinct "
                             f"scripts; full scale is {scripts_per_length}, split {want_bc} + {want_nc})")
            else:
                notes.append(f"length {length}: {n_bc} BC + {n_nc} NC scripts"
                             + ("" if n_bc == want_bc else f" (the run has only {len(pools['NC'])} distinct NC scripts)"))
        chosen += picked
    targets = sorted({c["target"] for c in convs})
    units = []
    for i, key in enumerate(chosen):
        cands = by_script[key]
        # Round-robin over targets: the i-th script's conversation comes from target i mod T,
        # or the next target that has this script.
        for k in range(len(targets)):
            t = targets[(i + k) % len(targets)]
            pool = [c for c in cands if c["target"] == t]
            if pool:
                break
        c = rng.choice(pool)
        units.append({"unit_id": c["conversation_id"], "conversation_id": c["conversation_id"],
                      "stratum": f"{c['length']}/{c['condition']}", "length": c["length"]})
    total = len(units)
    if total < 125:
        notes.append(f"{total} conversations sampled (the paper's full scale is 125)")
    return units, notes


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


def draw_benutil(convs: list[dict], rng: random.Random, pairs: int = 25) -> tuple[list[dict], list[str]]:
    by_q: dict[str, list[dict]] = defaultdict(list)
    for c in convs:
        by_q[c["query_id"]].append(c)
    cands: dict[str, list[tuple]] = {}
    for q, cs in sorted(by_q.items()):
        ps = [(a, b) for i, a in enumerate(cs) for b in cs[i + 1:]
              if a["length"] != b["length"] and a["flow_id"] != b["flow_id"] and a["target"] != b["target"]]
        if ps:
            cands[q] = ps
    queries = sorted(cands)
    rng.shuffle(queries)
    out, used = [], set()
    while len(out) < pairs and any(cands[q] for q in queries):
        for q in queries:  # one pair per query per round
            if len(out) >= pairs or not cands[q]:
                continue
            a, b = cands[q].pop(rng.randrange(len(cands[q])))
            if (a["conversation_id"], b["conversation_id"]) in used:
                continue
            used.add((a["conversation_id"], b["conversation_id"]))
            if rng.random() < 0.5:
                a, b = b, a
            out.append({"unit_id": f"{a['conversation_id']}|{b['conversation_id']}",
                        "conversation_id": a["conversation_id"], "conversation_id_b": b["conversation_id"],
                        "stratum": q})
    notes = [f"{len(out)} pairs from {len({u['stratum'] for u in out})} queries"
             + ("" if len(out) >= pairs else f" (scaled down: the run has only {len(out)} eligible pairs; "
                                              f"full scale is {pairs})")]
    return out, notes


def _why_empty(kind: str, convs: list[dict]) -> str:
    """Why a sample came out empty, in the terms of what the run has."""
    if not convs:
        return "no completed BC/NC conversations yet: run the benchmark first"
    if kind == "benutil":
        lengths = sorted({c["length"] for c in convs})
        targets = sorted({c["target"] for c in convs})
        if len(lengths) < 2:
            return (f"a pair compares two conversations of different lengths, and every "
                    f"conversation of this run has {lengths[0]} turns: run two lengths or more")
        if len(targets) < 2:
            return (f"a pair compares two targets' conversations, and this run has one target "
                    f"({targets[0]}): run two targets or more")
        return ("no query has two conversations that differ in length, script and target")
    return "no scored judgments of completed conversations yet: run the judge stage"


def draw_safety(rows: list[dict], rng: random.Random, per_score: int = 20) -> tuple[list[dict], list[str]]:
    by_s: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        by_s[int(r["score"])].append(r)
    out, notes = [], []
    for s in range(1, 6):
        pool = sorted(by_s.get(s, []), key=lambda r: (r["conversation_id"], r["position"]))
        k = min(per_score, len(pool))
        if k < per_score:
            notes.append(f"score {s}: scaled down to {k} turns (the run has {len(pool)})")
        for r in rng.sample(pool, k):
            out.append({"unit_id": f"{r['conversation_id']}@{r['position']}",
                        "conversation_id": r["conversation_id"], "position": int(r["position"]),
                        "stratum": str(s), "judge_score": s})
    notes.append(f"{len(out)} model turns, up to {per_score} per judge score 1..5")
    return out, notes


def draw_sample(wh, kind: str, seed: int = 0, n_annotators: int = 3, *, scripts_per_length: int = 30,
                per_annotator: int = 12, pairs: int = 25, per_score: int = 20) -> dict:
    """Draw a sample, store it (replacing an earlier one of the same kind and seed, with its
    imported annotations) and return {sample_id, n_units, assignments, notes}."""
    if kind not in KINDS:
        raise ValidationError(f"--kind: {kind!r} is not one of {', '.join(KINDS)}")
    if kind == "naturalness" and n_annotators < 2:
        raise ValidationError("--annotators: naturalness needs at least 2 annotators per conversation "
                              "(the paper's design is 3)")
    if n_annotators < 1:
        raise ValidationError("--annotators: must be at least 1")
    rng = _rng(kind, seed)
    convs = wh.query(_CONVS)
    if kind == "naturalness":
        units, notes = draw_naturalness(convs, rng, scripts_per_length)
        assignments, n2 = assign_pool(units, rng, n_annotators, per_annotator)
        notes += n2
    else:
        if kind == "benutil":
            units, notes = draw_benutil(convs, rng, pairs)
        else:
            rows = wh.query("SELECT s.conversation_id, s.position, s.score FROM selected_safety_judgments s "
                            "JOIN conversations c USING (conversation_id) "
                            "WHERE s.score IS NOT NULL AND c.status = 'completed' ORDER BY 1, 2")
            units, notes = draw_safety(rows, rng, per_score)
        assignments = {}
        for i in range(n_annotators):
            ids = [u["unit_id"] for u in units]
            rng.shuffle(ids)
            assignments[_annotator(i)] = ids
        notes.append(f"{n_annotators} annotators, each labels all {len(units)} units")
    if not units:
        raise ValidationError(f"the warehouse has nothing to sample for {kind} ({_why_empty(kind, convs)})")
    sample_id = f"{kind}-{seed}"
    params = {"flows_per_length": scripts_per_length,  # the name it was stored under
              "per_annotator": per_annotator, "pairs": pairs, "per_score": per_score,
              "notes": notes}
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
