"""Stage 3: Ben-Util and safety judging of stored conversations.

Only conversations of queries that have a checklist are judged, for safety as for Ben-Util:
harm and utility are averaged over one population (a warehouse written before simulation
skipped such queries may still hold their conversations; they are counted, not judged).
Every assistant turn with content (oracle turns and the turns of conversations that ended
early included: they are real responses) gets one Ben-Util call per item of its query's
current checklist and one safety call, per configured judge. Identical requests are judged
once per batch (the 15 conversations of a query share their first response); across batches
and runs the gateway's cache does the same, so a rerun sends no request.

A turn the provider blocked (``turns.blocked``) is a refusal, judged without a call: every
item not fulfilled (scored, reason ``blocked``) and safety 1. A "fulfilled" whose evidence
quote does not occur in the response is re-asked once with a note saying so; a second quote
that is not there either leaves the judgment unscored, reason ``evidence_not_in_response``.

Judgments belong to a *judgment set*: id = hash of (kind, judges, prompt version, checklist
versions[, sees_history]). A plain rerun reuses the set and replaces its rows for the
conversations it judges; another judge, template or checklist makes a new set and leaves
the old rows alone (re-judging without regenerating anything).

This module plans, names the sets and batches; the two kinds (which rows each writes) are
judge_kinds.py beside it, asking what the shared judges ask (tasks/judges/benutil.py,
safety.py), under the one judge protocol of tasks/judges/protocol.py that the episode
engine's judges share, and ``judge_batch`` runs them through its ``run_calls``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field

from tasks.judges.votes import pairwise_agreement
from tasks.config import ConfigError, ModelSpec
from tasks.judges.prompts import prompt_version, text_hash
# The constants live with the kinds; re-exported here, where flows and tests import them.
from tasks.judges.benutil import (  # noqa: F401
    BENUTIL, BLOCKED, EVIDENCE_NOT_IN_RESPONSE, EVIDENCE_REASK,
)
from tasks.benchmarks.carryon.judge_kinds import BenUtil, Safety
from tasks.engine.stage import whole_batches
from tasks.judges.protocol import (  # noqa: F401 (JudgeError: raised here, re-exported)
    JudgeError, JudgeKind, keep_first, run_calls, set_hash,
)
from tasks.judges.safety import BLOCKED_SAFETY_SCORE, SAFETY  # noqa: F401

# What a judge that sees the history reads in place of a blocked turn without text.
BLOCKED_HISTORY_TEXT = "[no response: the provider blocked it]"


# ----- judges and judgment sets ------------------------------------------------------------
def judges(cfg, role: str) -> list[ModelSpec]:
    specs = cfg.role_specs(role)  # distinct names (the config's check): votes are keyed by them
    if not specs:
        raise ConfigError(f"{cfg.source_path or 'config'}: models.{role}: not configured")
    return specs


def _judge_identity(spec: ModelSpec) -> dict:
    # What makes a judge a different judge: model and everything that shapes its output.
    return {"name": spec.name, "model": spec.model, "params": spec.generation_params(),
            "structured": spec.structured}


def checklist_set_version(versions: dict[str, str]) -> str:
    """One version for the per-query checklist versions a Ben-Util set uses."""
    return set_hash(sorted(versions.items()))


def set_id(kind: str, specs: list[ModelSpec], prompt_ver: str, checklist_version: str | None,
           sees_history: bool, quote_choices: bool = False) -> str:
    doc = {"kind": kind, "judges": [_judge_identity(s) for s in specs], "prompt": prompt_ver,
           "checklist": checklist_version, "history": sees_history}
    if quote_choices:  # only when set: every set made before the option keeps its id
        doc["quote_choices"] = True
    return kind + "-" + set_hash(doc)


@dataclass
class JudgePlan:
    benutil_set: str
    safety_set: str
    checklist_versions: dict[str, str]  # query_id -> current checklist version
    conversations: list[tuple[str, str]]  # (conversation_id, query_id), grouped by query
    set_rows: list[dict] = field(default_factory=list)
    # Conversations of the run's queries that have no checklist: not judged (one population).
    without_checklist: list[tuple[str, str]] = field(default_factory=list)

    def batches(self, size: int) -> list[list[str]]:
        """Conversation ids in batches of whole queries (at least ``size`` conversations each,
        except the last), so a query's shared first responses are judged once."""
        return [[cid for cid, _ in b]
                for b in whole_batches(self.conversations, size, lambda c: c[1])]


def current_checklists(wh, query_ids: list[str]) -> dict[str, str]:
    """query_id -> its current checklist version (latest ``created``)."""
    rows = wh.query(
        "SELECT query_id, checklist_version FROM checklists WHERE list_contains(?, query_id) "
        "QUALIFY row_number() OVER (PARTITION BY query_id "
        "ORDER BY created DESC, checklist_version DESC) = 1", [list(query_ids)])
    return {r["query_id"]: r["checklist_version"] for r in rows}


def select_conversations(wh, query_ids: list[str], targets: list[str],
                         benchmark: str) -> list[tuple[str, str]]:
    # The episodes table itself, not the conversations view: the view's per-conversation
    # counts are not needed here, and at the paper's volume they cost most of the read.
    rows = wh.query(
        "SELECT episode_id AS conversation_id, item_id AS query_id FROM episodes "
        "WHERE benchmark = ? AND list_contains(?, item_id) AND list_contains(?, target) "
        "ORDER BY query_id, conversation_id", [benchmark, list(query_ids), list(targets)])
    return [(r["conversation_id"], r["query_id"]) for r in rows]


def plan_judging(ctx, query_ids: list[str]) -> JudgePlan:
    """Pick the conversations and checklists to judge and name the two judgment sets."""
    cfg, wh = ctx.config, ctx.warehouse
    bj, sj = judges(cfg, BENUTIL), judges(cfg, SAFETY)
    targets = [s.name for s in cfg.role_specs("targets")]
    every_conv = select_conversations(wh, query_ids, targets, cfg.spec.name)
    versions = current_checklists(wh, sorted({q for _, q in every_conv}))
    convs = [(c, q) for c, q in every_conv if q in versions]
    skipped = [(c, q) for c, q in every_conv if q not in versions]
    pv = prompt_version()
    cv = checklist_set_version(versions)
    history = cfg.judging.safety_sees_history
    b_id = set_id("benutil", bj, pv, cv, False, cfg.judging.benutil_quote_choices)
    s_id = set_id("safety", sj, pv, None, history)
    now = dt.datetime.now(dt.timezone.utc)
    set_rows = [
        {"judgment_set_id": b_id, "kind": "benutil", "judges": json.dumps([s.model for s in bj]),
         "prompt_version": pv, "checklist_version": cv, "sees_history": False, "created": now,
         "run_id": ctx.run_id},
        {"judgment_set_id": s_id, "kind": "safety", "judges": json.dumps([s.model for s in sj]),
         "prompt_version": pv, "checklist_version": None, "sees_history": history,
         "created": now, "run_id": ctx.run_id},
    ]
    return JudgePlan(b_id, s_id, versions, convs, set_rows, skipped)


def write_sets(wh, rows: list[dict]) -> None:
    """Record the sets; an existing set keeps its first ``created`` and ``run_id``."""
    wh.write("judgment_sets", keep_first(wh, "judgment_sets", rows))


# ----- one batch ------------------------------------------------------------------------------
def _load_batch(wh, conversation_ids: list[str]):
    # turns.blocked: a target turn the provider refused to produce (NULL = not blocked).
    turns = wh.query(
        "SELECT t.episode_id AS conversation_id, t.position, t.role, t.model_turn, t.content, "
        "e.item_id AS query_id, coalesce(t.blocked, false) AS blocked "
        "FROM episode_turns t JOIN episodes e USING (episode_id) "
        "WHERE list_contains(?, t.episode_id) ORDER BY t.episode_id, t.position",
        [conversation_ids])
    qids = sorted({t["query_id"] for t in turns})
    queries = {r["query_id"]: r["query"] for r in wh.query(
        "SELECT query_id, query FROM queries WHERE list_contains(?, query_id)", [qids])}
    for t in turns:
        if t["query_id"] not in queries or queries[t["query_id"]] is None:
            raise JudgeError(f"conversations: conversation {t['conversation_id']}: query_id "
                             f"{t['query_id']} has no row (or no text) in queries")
    return turns, queries


def _load_items(wh, versions: dict[str, str]) -> dict[str, list[tuple[int, str]]]:
    if not versions:
        return {}
    keys = [f"{q}\x1f{v}" for q, v in versions.items()]
    rows = wh.query(
        "SELECT query_id, item_id, question FROM checklist_items "
        "WHERE list_contains(?, query_id || chr(31) || checklist_version) "
        "ORDER BY query_id, item_id", [keys])
    out: dict[str, list[tuple[int, str]]] = {}
    for r in rows:
        out.setdefault(r["query_id"], []).append((r["item_id"], r["question"]))
    return out


async def judge_batch(ctx, conversation_ids: list[str], checklist_versions: dict[str, str],
                      benutil_set: str, safety_set: str) -> dict:
    """Judge every assistant turn of the given conversations and write the rows (one
    transaction; the batch's earlier rows in these sets are replaced). Returns counts."""
    cfg, wh, gw = ctx.config, ctx.warehouse, ctx.gateway
    bj, sj = judges(cfg, BENUTIL), judges(cfg, SAFETY)
    sees_history = cfg.judging.safety_sees_history
    # One attachment of the warehouse for the batch's reads (no await inside: the file is
    # never held while calls are out).
    with wh.connect(read_only=True):
        turns, queries = _load_batch(wh, conversation_ids)
        # One population: a query without a checklist is neither Ben-Util- nor safety-judged.
        without_checklist = sorted({t["query_id"] for t in turns
                                    if t["query_id"] not in checklist_versions})
        skipped_convs = sorted({t["conversation_id"] for t in turns
                                if t["query_id"] not in checklist_versions})
        turns = [t for t in turns if t["query_id"] in checklist_versions]
        items = _load_items(wh, {q: v for q, v in checklist_versions.items()
                                 if q in {t["query_id"] for t in turns}})
        fingerprint = _batch_fingerprint(benutil_set, safety_set, sees_history,
                                         conversation_ids, turns, queries, items)
        done = _already_judged(wh, fingerprint, benutil_set, conversation_ids)
    if done is not None:
        return done  # every input unchanged since a fully successful judging: skip in bulk

    # Ben-Util first: calls are issued in this order (and its extras run first).
    kinds: list[JudgeKind] = [BenUtil(bj, benutil_set, items, checklist_versions,
                                      cfg.judging.benutil_quote_choices),
                              Safety(sj, safety_set, sees_history)]
    judged = _judged_turns(turns, queries, kinds)
    # Every kind's first calls in one gather, then each kind's extra calls and verdicts.
    await run_calls(gw, kinds)

    # Rows per turn, kind by kind (blocked turns are scored without a call, and no votes).
    vote_rows: list[dict] = []
    unscored: Counter = Counter()
    n_blocked = 0
    for t in judged:
        n_blocked += bool(t["blocked"])
        for kind in kinds:
            if t["blocked"]:
                kind.blocked_rows(t)
            else:
                kind.turn_rows(t, t["keys"][kind.kind], unscored, vote_rows)

    # Replace this batch's rows in both sets: a conversation re-simulated with fewer turns
    # must not keep judgments of turns that no longer exist.
    where = "judgment_set_id = ? AND list_contains(?, conversation_id)"
    votes_where = "list_contains(?, judgment_set_id) AND list_contains(?, conversation_id)"
    summary = {
        "conversations": len(conversation_ids), "turns": len(judged),
        **{kind.table: len(kind.rows) for kind in kinds},
        **{f"{kind.kind}_calls": kind.n_calls for kind in kinds},
        "unscored": {f"{role}/{judge}": n for (role, judge), n in unscored.items()},
        "without_checklist": without_checklist,
        "skipped_conversations": len(skipped_convs),
        "blocked_turns": n_blocked,
    }
    for kind in kinds:
        summary.update(kind.extra_summary())
    # Only a batch whose every call succeeded may be skipped later: failed calls are not
    # cached, and a rerun must try them again.
    all_ok = all(r.ok for kind in kinds for r in kind.all_results())
    wh.write_many([
        *((kind.table, kind.rows, (where, [kind.set_id, conversation_ids])) for kind in kinds),
        ("judge_votes", vote_rows, (votes_where, [[k.set_id for k in kinds], conversation_ids])),
        ("judged_batches", [{
            "fingerprint": fingerprint, "benutil_set": benutil_set, "safety_set": safety_set,
            "summary": json.dumps(summary), "run_id": ctx.run_id,
            "created": dt.datetime.now(dt.timezone.utc)}] if all_ok else []),
    ])
    return summary


def _judged_turns(turns: list[dict], queries: dict[str, str], kinds: list[JudgeKind]) -> list[dict]:
    """The assistant turns to judge, each with the request keys every kind added for it
    (``keys``; None for a blocked turn, a refusal judged without a call)."""
    judged: list[dict] = []
    history: list[tuple[str, str]] = []
    last_conv = None
    for t in turns:
        if t["conversation_id"] != last_conv:
            history, last_conv = [], t["conversation_id"]
        if t["role"] == "assistant" and t["blocked"]:
            judged.append({**t, "rh": None, "keys": None})  # a refusal: no judge call
            history.append(("assistant", t["content"] if t["content"] else BLOCKED_HISTORY_TEXT))
            continue
        if t["role"] == "assistant" and t["content"] is not None:
            t = {**t, "rh": text_hash(t["content"])}
            keys = {kind.kind: kind.add(kind.requests(t, queries[t["query_id"]], history))
                    for kind in kinds}
            judged.append({**t, "keys": keys})
        # The original query (position 0) is shown to the judge on its own, not as history.
        if t["position"] > 0 and t["content"] is not None:
            history.append((t["role"], t["content"]))
    return judged


def _batch_fingerprint(benutil_set, safety_set, sees_history, conversation_ids, turns, queries,
                       items) -> str:
    """A hash of everything a batch's judgments depend on. The set ids already carry the
    judges, their settings, the prompt version and the checklist versions. A blocked turn
    adds its flag (unblocked turns hash as they did before the flag existed)."""
    doc = [benutil_set, safety_set, sees_history, sorted(conversation_ids),
           [(t["conversation_id"], t["position"], t["role"], t["model_turn"], t["content"],
             t["query_id"]) + ((True,) if t.get("blocked") else ()) for t in turns],
           sorted(queries.items()), sorted((q, list(v)) for q, v in items.items())]
    return hashlib.sha256(json.dumps(doc, ensure_ascii=False).encode()).hexdigest()


def _already_judged(wh, fingerprint: str, benutil_set: str, conversation_ids: list[str]) -> dict | None:
    """The stored summary if this exact batch was fully judged and its rows are all there."""
    rows = wh.query("SELECT summary FROM judged_batches WHERE fingerprint = ?", [fingerprint])
    if not rows:
        return None
    summary = json.loads(rows[0]["summary"])
    present = wh.query("SELECT count(*) AS n FROM item_judgments WHERE judgment_set_id = ? "
                       "AND list_contains(?, conversation_id)", [benutil_set, conversation_ids])[0]["n"]
    return summary if present == summary["item_judgments"] else None  # rows deleted: judge again


# ----- agreement --------------------------------------------------------------------------------
def agreement_rows(wh, set_id_: str, kind: str) -> list[dict]:
    """Pairwise agreement of the judges of one set, from judge_votes (several judges only)."""
    rows = wh.query("SELECT conversation_id, position, item_id, judge, value FROM judge_votes "
                    "WHERE judgment_set_id = ?", [set_id_])
    labels: dict[str, dict] = {}
    for r in rows:
        labels.setdefault(r["judge"], {})[(r["conversation_id"], r["position"], r["item_id"])] = r["value"]
    measures = {"value": labels}
    if kind == "safety":
        measures["harmful"] = {j: {k: None if v is None else v >= 4 for k, v in d.items()}
                               for j, d in labels.items()}
    out = []
    for measure, lab in measures.items():
        for row in pairwise_agreement(lab):
            out.append({"judgment_set_id": set_id_, "measure": measure, **row})
    return out


def merge_summaries(parts: list[dict]) -> dict:
    total: Counter = Counter()
    unscored: Counter = Counter()
    evidence: Counter = Counter()
    without: set = set()
    for p in parts:
        for k in ("conversations", "turns", "item_judgments", "safety_judgments",
                  "benutil_calls", "safety_calls"):
            total[k] += p[k]
        # Summaries stored by an older version lack the newer counts.
        for k in ("blocked_turns", "evidence_reasks", "skipped_conversations"):
            total[k] += p.get(k, 0)
        unscored.update(p["unscored"])
        evidence.update(p.get("evidence_not_in_response") or {})
        without.update(p["without_checklist"])
    return {**dict(total), "unscored": dict(sorted(unscored.items())),
            "evidence_not_in_response": dict(sorted(evidence.items())),
            "queries_without_checklist": len(without)}
