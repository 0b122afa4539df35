"""CarryOnBench's own kind of human validation (App. A.4), registered beside its spec: the
naturalness of its simulated user turns. ``carryon validate sample --kind naturalness``.

Definitions: a user turn's label 1..4 is natural when >= 3. Only turns with labels from all
of their assigned annotators count. "Natural by majority": more than half of its labels
natural. "Unnatural by all": every label < 3. A "disagreement" is a turn whose binarised
labels are not unanimous; it "involves an extreme label" when one of its labels is 1 or 4.
Cohen's kappa and Krippendorff's alpha as tasks/validation/agreement.py defines them.

The sample: every distinct 4-turn script plus ``scripts_per_length`` (30) scripts per longer
length, split 2:1 BC:NC as the simulation allocates them (a class with too few distinct
scripts leaves its share to the other); one completed conversation per script, the target
chosen round-robin; ``n_annotators`` (3) annotators per conversation from a pool sized so
each annotator gets about ``per_annotator`` (12, i.e. 11-13) conversations, balanced by
length, shuffled within each assignment. With fewer scripts than that in the run, everything
available is taken and the notes say so. Every user turn is rated 1-4 (1 very unnatural ..
4 very natural); the agreement numbers are on the binarised label (natural: >= 3).
"""

from __future__ import annotations

import random
import statistics
from collections import defaultdict

from tasks.core.registry import validation_kind
from tasks.validation import ValidationError, ValidationKind
from tasks.validation.agreement import alpha_of, pairwise_kappa
from tasks.validation.report import labels_of, number, pct

# Its completed scripted conversations (the views beside its spec read its episodes).
# ``condition`` is the part its spec's condition plays (BC or NC), whatever its name.
CONVERSATIONS = """
SELECT c.conversation_id, c.target, c.query_id, c.flow_id, cc.part AS condition, c.length
FROM conversations c JOIN carryon_conditions cc USING (condition)
WHERE c.status = 'completed' AND cc.part IN ('BC', 'NC')
ORDER BY c.conversation_id"""


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


def natural(v: int) -> int:
    return 1 if v >= 3 else 0


def naturalness_stats(labels: dict) -> dict:
    """labels = {turn key: {annotator: 1..4}} (complete turns only)."""
    n = len(labels)
    if not n:
        return {"n_turns": 0}
    binl = {u: {a: natural(v) for a, v in d.items()} for u, d in labels.items()}
    maj = sum(1 for d in binl.values() if 2 * sum(d.values()) > len(d))
    all_un = sum(1 for d in binl.values() if sum(d.values()) == 0)
    disagree = [u for u, d in binl.items() if len(set(d.values())) > 1]
    extreme = sum(1 for u in disagree if any(v in (1, 4) for v in labels[u].values()))
    per_ann: dict[str, list[int]] = {}
    for d in binl.values():
        for a, v in d.items():
            per_ann.setdefault(a, []).append(v)
    rates = {a: sum(v) / len(v) for a, v in sorted(per_ann.items())}
    kappa, pairs = pairwise_kappa(binl)
    return {
        "n_turns": n,
        "n_annotators": len(rates),
        "pct_natural_majority": 100.0 * maj / n,
        "pct_unnatural_all": 100.0 * all_un / n,
        "n_disagreements": len(disagree),
        "pct_disagreements_extreme": (100.0 * extreme / len(disagree)) if disagree else None,
        "kappa_mean": kappa,
        "kappa_pairs": pairs,
        "alpha": alpha_of(binl),
        "annotator_natural_rate": rates,
        "rate_min": min(rates.values()),
        "rate_max": max(rates.values()),
        "rate_sd": statistics.stdev(rates.values()) if len(rates) > 1 else None,
    }



@validation_kind("naturalness")
class Naturalness(ValidationKind):
    name, asks, pooled = "naturalness", "user_turns", True
    scale = [[1, "very unnatural"], [2, "somewhat unnatural"], [3, "somewhat natural"],
             [4, "very natural"]]
    instructions = "Rate every user turn: how natural is it as something a real person would write here?"

    def check_annotators(self, n: int) -> None:
        if n < 2:
            raise ValidationError("--annotators: naturalness needs at least 2 annotators per "
                                  "conversation (the paper's design is 3)")

    def draw(self, wh, spec, rng, options):
        return draw_naturalness(wh.query(CONVERSATIONS), rng, options.get("scripts_per_length", 30))

    def empty(self, wh, spec) -> str:
        return "no completed BC/NC conversations yet: run the benchmark first"

    def results(self, wh, sample_id: str) -> dict:
        n_ann = wh.query("SELECT n_annotators FROM validation_samples WHERE sample_id = ?",
                         [sample_id])[0]["n_annotators"]
        turns: dict[tuple, dict] = {}
        for r in labels_of(wh, sample_id):
            turns.setdefault((r["conversation_id"], r["position"]), {})[r["annotator"]] = r["value"]
        complete = {k: v for k, v in turns.items() if len(v) >= n_ann}
        out = naturalness_stats(complete)
        out["n_turns_incomplete"] = len(turns) - len(complete)
        return out

    def markdown(self, r: dict) -> list[str]:
        if not r["n_turns"]:
            return ["No user turn has labels from all of its annotators yet."]
        d = r["pct_disagreements_extreme"]
        return [
            f"- user turns with all labels: {r['n_turns']} ({r['n_turns_incomplete']} incomplete "
            f"left out); annotators: {r['n_annotators']}",
            f"- natural by majority (label >= 3): {r['pct_natural_majority']:.2f} %",
            f"- unnatural by all annotators: {r['pct_unnatural_all']:.2f} %",
            f"- disagreements involving an extreme label (1 or 4): "
            f"{'n/a' if d is None else f'{d:.2f} %'} of {r['n_disagreements']}",
            f"- Cohen's kappa (binarised, mean over {len(r['kappa_pairs'])} annotator pairs): "
            f"{number(r['kappa_mean'])}",
            f"- Krippendorff's alpha (binarised, nominal): {number(r['alpha'])}",
            f"- per-annotator natural rate: {pct(r['rate_min'])} to {pct(r['rate_max'])}, "
            f"SD {pct(r['rate_sd'])}"]
