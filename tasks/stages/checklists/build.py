"""The checklist pipeline (DESIGN §2) of the checklists stage, one item at a time, batches in
one transaction. An item's *request* is what the checklist is built for: its prompt with its
benign intent stated, where it has one (the stage's arguments say which of the item's fields;
tasks/stages/checklists/__init__.py). Steps, each a cached gateway call whose output is stored:

1. ensemble answers  (role ``ensemble``; every model is asked for a detailed, compliant answer
                     to the request) → ensemble_answers; an answer cut at max_tokens is
                     recorded with its text and a ``truncated`` error, and not used
2. guard filter      (role ``wildguard``; WildGuard's text format, or any chat model) → guard_verdicts;
                     answers judged harmful, refusals, and answers whose verdict is missing are
                     dropped (the reason is stored per answer); an item needs
                     ``checklists.min_harmless`` kept answers → checklist_queries
3. decomposition     (role ``decomposer``; each kept answer → yes/no items) → decomposed_items
4. merge             (role ``merger``; one deduplicated list citing answer ids, most important
                     first) → merged_items; only the first ``checklists.max_items`` go on (the
                     rest are stored with ``capped`` set, and the item's ``capped_from`` says
                     how many the merger wrote)
5. misuse filter     (role ``misuse_filter``; keep/drop each merged item) → merged_items.kept
   → checklist_items, checklists (questions numbered 1..n, version = hash of the questions)

The tables key an item by its id in their column ``query_id`` (the name CarryOnBench's homes
have always had: its items are its queries). A step that fails for an item (model error, or
garbage after the gateway's re-asks) drops the item with the step and reason in
``checklist_queries``; an answer cut off at ``max_tokens`` is its own reason (``truncated:
...``), never a silent short answer. A call that got no answer at all (a transport fault,
rate limit or timeout past the retries: tasks/engine/stage_errors.py ``TRANSPORT_KINDS``) in
any step leaves its item *unbuilt* (``failed``), never decided by a filter: a checklist from
the answers that happened to get through would differ from a clean run's. The stage then
fails, naming how many items and why, after writing what it built; the rerun retries the
failed calls (the rest come from the cache). An empty checklist is never written.
The ``checklists`` table holds each item's valid checklists; the current one is the latest
``created``. When a rerun drops an item, its ``checklists`` rows are removed (its questions
stay under their versions, so older verdicts still resolve), so "current" always reflects
the latest run that processed the item.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field

from prompts import render
from tasks.engine.stage_errors import is_transport_error
from tasks.model_entry import ModelSpec
from tasks.stages.checklists.models import (
    ITEM_CATEGORIES, Decomposition, GuardChat, merge_model, misuse_model, parse_wildguard,
)
from tasks.stages.checklists.roles import Roles

# The templates name the request ``oracle_prompt``, as they did when CarryOnBench's oracle
# prompt (its query with the benign intent stated) was the only request; their text, and so
# every cache key, is unchanged.


def checklist_version(items: list[dict]) -> str:
    """A checklist's version: the hash of its numbered items (question and category)."""
    blob = json.dumps([[it["question"], it["category"]] for it in items], ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def truncated(r) -> bool:
    """True when the answer was cut off at max_tokens: the provider said so (finish reason
    ``length``), or a structured answer failed as JSON that ends mid-way (the tell-tale of a
    cut-off answer, after the gateway's re-asks got the same). An answer left empty because
    the budget went to reasoning has its own error kind and is not counted here."""
    if getattr(r, "error_kind", None) == "reasoning_exhausted":
        return False
    if getattr(r, "finish_reason", None) == "length":
        return True
    return (not r.ok and r.error_kind == "invalid_output"
            and "EOF while parsing" in (r.error or ""))


def _fail(r, spec: ModelSpec | None = None) -> str:
    """The stored reason of a failed or cut-off call. A cut-off answer reads
    ``truncated: ...`` (naming the budget to raise), followed by the gateway's error, if any."""
    why = f"{r.error_kind}: {r.error}" if not r.ok else None
    if spec is not None and truncated(r):
        cut = (f"truncated: the answer reached max_tokens ({spec.max_tokens}) and was cut off; "
               f"raise {spec.where}.max_tokens")
        return f"{cut} ({why})" if why else cut
    return why or "ok"


@dataclass
class Outcome:
    """Everything one item produced: warehouse rows and the counts the statistics need."""

    item_id: str
    rows: dict[str, list[dict]] = field(default_factory=lambda: {
        "ensemble_answers": [], "guard_verdicts": [], "decomposed_items": [], "merged_items": [],
        "checklist_items": [], "checklists": []})
    counts: dict[str, int] = field(default_factory=dict)
    dropped_step: str | None = None
    reason: str | None = None
    version: str | None = None
    n_items: int = 0
    capped_from: int | None = None  # items the merger wrote, when more than the cap
    failed: bool = False  # unbuilt: a call of the step got no answer (not a decision)

    def drop(self, step: str, reason: str, failed: bool = False) -> "Outcome":
        self.dropped_step, self.reason, self.failed = step, reason, failed
        return self

    def summary(self) -> dict:
        return {"item_id": self.item_id, "step": self.dropped_step, "reason": self.reason,
                "version": self.version, "n_items": self.n_items, "capped_from": self.capped_from,
                "failed": self.failed, "counts": dict(self.counts)}


# ----- the steps ------------------------------------------------------------------------------
async def _answer(gw, spec: ModelSpec, qid: str, request: str):
    msgs = [{"role": "user", "content": render("checklists/ensemble.j2",
                                               oracle_prompt=request)}]
    # Ensemble models may sample: one key per (item, answer) so reruns replay the same answer.
    return spec.name, await gw.chat(spec, "ensemble", msgs, sample_key=f"{qid}:{spec.name}")


async def _guard(gw, spec: ModelSpec, prompt: str, response: str) -> dict:
    """One guard verdict: harmful_* flags, kept, reason, raw, call_hash (WildGuard's own text
    format, or any chat model answering the flags as JSON)."""
    if spec.mode == "wildguard":
        text = render("checklists/wildguard.j2", prompt=prompt, response=response) + "\n"
        r = await gw.text(spec, "wildguard", text)
    else:
        msgs = [{"role": "user", "content": render("checklists/wildguard_chat.j2",
                                                   prompt=prompt, response=response)}]
        r = await gw.chat(spec, "wildguard", msgs, schema=GuardChat)
    if not r.ok:
        return {"kept": False, "reason": f"guard failed: {_fail(r, spec)}", "call_hash": r.call_hash,
                "failed": is_transport_error(r.error_kind)}
    if spec.mode != "wildguard":
        flags = r.parsed.model_dump()
    else:
        try:
            v = parse_wildguard(r.content)
        except ValueError as e:
            return {"kept": False, "reason": f"guard verdict unparseable: {e}",
                    "raw": r.content, "call_hash": r.call_hash}
        flags = {"harmful_request": v.harmful_request, "response_refusal": v.response_refusal,
                 "harmful_response": v.harmful_response}
    return {**flags, **guard_decision(flags), "raw": r.content, "call_hash": r.call_hash}


_VERDICTS = ("harmful response", "refusal", "harmful response; refusal")


def guard_decision(flags: dict) -> dict:
    """Keep an answer only if it is neither harmful nor a refusal (a refusal is no gold-standard
    answer: its items would be boilerplate). ``response_refusal`` None (WildGuard's N/A) is not
    a refusal. The reason names every cause."""
    causes = [why for key, why in (("harmful_response", "harmful response"),
                                   ("response_refusal", "refusal")) if flags.get(key)]
    return {"kept": not causes, "reason": "; ".join(causes) or None}


async def _decompose(gw, spec: ModelSpec, request: str, answer: str, max_items: int):
    msgs = [{"role": "user", "content": render("checklists/decompose.j2",
                                               oracle_prompt=request,
                                               answer=answer, categories=ITEM_CATEGORIES,
                                               max_items=max_items)}]
    return await gw.chat(spec, "decomposer", msgs, schema=Decomposition)


async def build_checklist(gw, roles: Roles, item_id: str, request: str, run_id: str,
                          cut_before: frozenset[str] = frozenset()) -> Outcome:
    """Run steps 1-5 for one item's ``request``; never raises for model failures (they become
    data: each step that drops the item says so on ``out`` and returns None).
    ``cut_before``: call hashes of ensemble answers an earlier run recorded as cut off (a cache
    hit may not carry the finish reason; the stored verdict stands)."""
    out = Outcome(item_id)
    if (ok := await _ensemble_step(gw, roles, item_id, request, cut_before, out)) is None:
        return out
    if (kept_ids := await _guard_step(gw, roles, item_id, request, ok, out)) is None:
        return out
    per_answer = await _decompose_step(gw, roles, item_id, request, ok, kept_ids, out)
    if per_answer is None:
        return out
    if (merged := await _merge_step(gw, roles, item_id, request, per_answer, kept_ids, out)) is None:
        return out
    if (final := await _misuse_step(gw, roles, item_id, request, merged, out)) is None:
        return out
    # numbering and versioning
    out.version, out.n_items = checklist_version(final), len(final)
    out.rows["checklist_items"] = [
        {"query_id": item_id, "checklist_version": out.version, "item_id": i,
         "question": it["question"], "category": it["category"],
         "source_answers": json.dumps(it["source_answers"])}
        for i, it in enumerate(final, start=1)]
    out.rows["checklists"] = [{"query_id": item_id, "checklist_version": out.version,
                               "n_items": out.n_items, "created": dt.datetime.now(dt.timezone.utc),
                               "run_id": run_id}]
    return out


async def _ensemble_step(gw, roles: Roles, item_id: str, request: str, cut_before: frozenset[str],
                         out: Outcome) -> dict[str, str] | None:
    """1. Ensemble answers: answer id -> text of the usable ones."""
    c = out.counts
    answers = await asyncio.gather(*(_answer(gw, s, item_id, request) for s in roles.ensemble))
    specs = {s.name: s for s in roles.ensemble}
    # A cut-off answer is not used (its missing half would be missing items); its text is kept
    # for inspection, with the reason.
    errors = {aid: _fail(r, specs[aid]) for aid, r in answers if not r.ok or truncated(r)}
    for aid, r in answers:
        if r.ok and aid not in errors and r.call_hash in cut_before:
            r.finish_reason = "length"  # what the earlier run saw for this very call
            errors[aid] = _fail(r, specs[aid])
    ok = {aid: r.content for aid, r in answers if aid not in errors}
    c["answers_requested"], c["answers_ok"] = len(answers), len(ok)
    unanswered = [aid for aid, r in answers if is_transport_error(r.error_kind)]
    c["answers_truncated"] = sum(1 for e in errors.values() if e.startswith("truncated"))
    out.rows["ensemble_answers"] = [
        {"query_id": item_id, "answer_id": aid, "model": specs[aid].model,
         "answer": r.content, "call_hash": r.call_hash, "error": errors.get(aid)}
        for aid, r in answers]
    if unanswered:  # a checklist from the other answers would not be a clean run's
        out.drop("ensemble", "no answer from " + "; ".join(f"{aid}: {errors[aid]}"
                                                          for aid in unanswered), failed=True)
        return None
    if len(ok) < roles.min_harmless:  # no guard verdict could bring it back to the minimum
        out.drop("ensemble", f"{len(ok)} answer(s) < min_harmless {roles.min_harmless}; failed: "
                 + "; ".join(f"{aid}: {e}" for aid, e in errors.items()))
        return None
    return ok


async def _guard_step(gw, roles: Roles, item_id: str, request: str, ok: dict[str, str],
                      out: Outcome) -> list[str] | None:
    """2. Guard filter (failed answers are not judged: there is nothing to judge): the ids of
    the answers kept."""
    c = out.counts
    verdicts = await asyncio.gather(*(_guard(gw, roles.guard, request, text) for text in ok.values()))
    kept_ids = []
    for aid, v in zip(ok, verdicts):
        out.rows["guard_verdicts"].append({
            "query_id": item_id, "answer_id": aid, "model": roles.guard.model,
            "mode": roles.guard.mode, "harmful_request": v.get("harmful_request"),
            "response_refusal": v.get("response_refusal"),
            "harmful_response": v.get("harmful_response"), "kept": v["kept"],
            "reason": v.get("reason"), "call_hash": v.get("call_hash"), "raw": v.get("raw")})
        if v["kept"]:
            kept_ids.append(aid)
    c["answers_harmless"] = len(kept_ids)
    c["answers_harmful"] = sum(1 for v in verdicts if v.get("harmful_response"))
    c["answers_refused"] = sum(1 for v in verdicts if v.get("response_refusal"))
    unanswered = [(aid, v["reason"]) for aid, v in zip(ok, verdicts) if v.get("failed")]
    if unanswered:  # no verdict is not "harmful": the item waits for the rerun
        out.drop("guard", "; ".join(f"{aid}: {why}" for aid, why in unanswered), failed=True)
        return None
    if len(kept_ids) < roles.min_harmless:
        why = {}
        for v in verdicts:
            if not v["kept"]:
                key = v["reason"] if v["reason"] in _VERDICTS else "no verdict"
                why[key] = why.get(key, 0) + 1
        out.drop("guard", f"{len(kept_ids)} harmless answer(s) < min_harmless "
                          f"{roles.min_harmless} ({len(ok) - len(kept_ids)} of {len(ok)} "
                          "dropped by the guard: "
                          + ", ".join(f"{n} {k}" for k, n in sorted(why.items())) + ")")
        return None
    return kept_ids


async def _decompose_step(gw, roles: Roles, item_id: str, request: str, ok: dict[str, str],
                          kept_ids: list[str], out: Outcome) -> list[dict] | None:
    """3. Atomic decomposition of every kept answer: its items per answer."""
    c = out.counts
    decs = await asyncio.gather(*(_decompose(gw, roles.decomposer, request, ok[a], roles.max_items)
                                  for a in kept_ids))
    per_answer, failures = [], []
    for aid, r in zip(kept_ids, decs):
        if not r.ok:
            failures.append(f"{aid}: {_fail(r, roles.decomposer)}")
            continue
        items = [it.model_dump() for it in r.parsed.items]
        per_answer.append({"answer_id": aid, "items": items})
        out.rows["decomposed_items"] += [
            {"query_id": item_id, "answer_id": aid, "item_index": i, **it}
            for i, it in enumerate(items, start=1)]
    c["decompose_failed"] = len(failures)
    c["decomposed_items"] = len(out.rows["decomposed_items"])
    if failures:  # a checklist from part of the answers would silently miss their information
        out.drop("decompose", "decomposition failed for " + "; ".join(failures),
                 any(is_transport_error(r.error_kind) for r in decs))
        return None
    return per_answer


async def _merge_step(gw, roles: Roles, item_id: str, request: str, per_answer: list[dict],
                      kept_ids: list[str], out: Outcome) -> list[dict] | None:
    """4. Merge into one list that cites its answers; the first ``max_items`` go on."""
    msgs = [{"role": "user", "content": render(
        "checklists/merge.j2", oracle_prompt=request, answers=per_answer, answer_ids=kept_ids,
        categories=list(ITEM_CATEGORIES), max_items=roles.max_items)}]
    r = await gw.chat(roles.merger, "merger", msgs, schema=merge_model(kept_ids))
    if not r.ok:
        out.drop("merge", f"merge failed: {_fail(r, roles.merger)}", is_transport_error(r.error_kind))
        return None
    written = [{"question": it.question, "category": it.category,
                "source_answers": sorted(set(it.source_answers))} for it in r.parsed.items]
    # The cap: the merger lists the most important first, so the first max_items go on; the
    # rest are stored (capped, by the misuse step) and the item records how many the merger
    # wrote.
    merged, cut = written[:roles.max_items], written[roles.max_items:]
    out.counts["merged_items"] = len(merged)
    if cut:
        out.counts["merge_capped"] = len(cut)
        out.capped_from = len(written)
    out.rows["merged_items"] = [_merged_row(item_id, i, it, None, capped=True)
                                for i, it in enumerate(cut, start=len(merged) + 1)]
    return merged


def _merged_row(item_id: str, i: int, it: dict, decision, capped: bool = False) -> dict:
    return {"query_id": item_id, "merged_index": i, "question": it["question"],
            "category": it["category"], "source_answers": json.dumps(it["source_answers"]),
            "kept": decision.keep if decision else None,
            "misuse_reason": decision.reason if decision else None, "capped": capped}


async def _misuse_step(gw, roles: Roles, item_id: str, request: str, merged: list[dict],
                       out: Outcome) -> list[dict] | None:
    """5. Misuse filter: one decision per merged item, by name; the items kept."""
    msgs = [{"role": "user", "content": render("checklists/misuse.j2", oracle_prompt=request,
                                               items=merged)}]
    r = await gw.chat(roles.misuse, "misuse_filter", msgs, schema=misuse_model(len(merged)))
    decisions = ([getattr(r.parsed, f"item_{i}") for i in range(1, len(merged) + 1)] if r.ok
                 else [None] * len(merged))
    cut_rows = out.rows["merged_items"]
    out.rows["merged_items"] = [_merged_row(item_id, i, it, d)
                                for i, (it, d) in enumerate(zip(merged, decisions), start=1)] + cut_rows
    if not r.ok:
        out.drop("misuse", f"misuse filter failed: {_fail(r, roles.misuse)}",
                 is_transport_error(r.error_kind))
        return None
    final = [it for it, d in zip(merged, decisions) if d.keep]
    out.counts["misuse_dropped"] = len(merged) - len(final)
    if not final:
        out.drop("misuse", f"the misuse filter dropped all {len(merged)} items")
        return None
    return final


# ----- a batch: the pipeline per item, one transaction ------------------------------------------
_PER_ITEM_TABLES = ["ensemble_answers", "guard_verdicts", "decomposed_items", "merged_items"]


def _in(ids: list[str]) -> tuple[str, list]:
    return f"query_id IN ({', '.join('?' * len(ids))})", list(ids)


def write_outcomes(wh, outcomes: list[Outcome], run_id: str) -> None:
    """All rows of a batch in ONE transaction. Per-item step tables are replaced wholesale
    (a rerun with fewer items must not leave stale rows); checklists are keyed by version."""
    if not outcomes:
        return
    ids = [o.item_id for o in outcomes]
    batches: list[tuple] = [(t, [r for o in outcomes for r in o.rows[t]], _in(ids))
                            for t in _PER_ITEM_TABLES]
    batches.append(("checklist_queries", [{
        "query_id": o.item_id, "n_answers": o.counts.get("answers_ok", 0),
        "n_harmless": o.counts.get("answers_harmless", 0), "kept": o.version is not None,
        "step": o.dropped_step, "reason": o.reason, "checklist_version": o.version,
        "capped_from": o.capped_from, "run_id": run_id} for o in outcomes]))
    batches.append(("checklist_items", [r for o in outcomes for r in o.rows["checklist_items"]]))
    dropped = [o.item_id for o in outcomes if o.version is None]
    if dropped:
        batches.append(("checklists", [], _in(dropped)))
    batches.append(("checklists", [r for o in outcomes for r in o.rows["checklists"]]))
    wh.write_many(batches)


async def build_batch(ctx, work: list[tuple[str, str]], roles: Roles) -> list[dict]:
    """The five steps for every (item id, request) of the batch concurrently, then one
    write. Returns each item's summary (for the stage statistics)."""
    ids = [i for i, _ in work]
    cut = frozenset(r["call_hash"] for r in ctx.warehouse.query(
        f"SELECT call_hash FROM ensemble_answers WHERE {_in(ids)[0]} "
        "AND error LIKE 'truncated:%' AND call_hash IS NOT NULL", ids)) if ids else frozenset()
    outcomes = await asyncio.gather(*(
        build_checklist(ctx.gateway, roles, item_id, request, ctx.run_id, cut)
        for item_id, request in work))
    write_outcomes(ctx.warehouse, list(outcomes), ctx.run_id)
    return [o.summary() for o in outcomes]

