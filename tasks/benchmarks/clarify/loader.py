"""PACIFIC (github.com/dengyang17/PACIFIC, MIT): conversational QA over a table and paragraphs,
where some questions need a clarification before they can be answered.

Published shape (train / dev JSON): a list of documents, each
``{"table": {"uid", "table": [[cell, ...], ...]}, "paragraphs": [{"uid", "order", "text"}],
"questions": [{"uid", "order", "question", "original_question", "answer", "answer_type",
"answer_from", "scale", "req_clari", "follow_up", ...}]}``. A question that needs a
clarification has ``req_clari: true`` and ``answer_type: "question"``; its ``answer`` is the
system's clarifying question, and the *next* question of the dialogue is the user's reply,
whose ``original_question`` is the disambiguated question and whose ``answer`` is the reference.

Items (one per question; a clarification reply is part of its ambiguous question's item):

- ambiguous: prompts ``question`` (the ambiguous question) and ``disambiguated`` (the reply's
  ``original_question``); hidden ``intent`` (the disambiguated question: what the user means),
  ``slots.clarification`` (the user's published reply), ``clarifying_question`` (the reference
  clarifying question) and ``answers`` (and ``answer_spans`` for a multi-span answer: see
  ``_answer_spans``); meta ``ambiguous: true``;
- unambiguous: prompt ``question`` only; meta ``ambiguous: false``.

Both keep the bare question in ``hidden.question`` (judges show it without the document).

Questions are shown without the dialogue's earlier turns, so the *self-contained*
``original_question`` is used (a follow-up like "How about 2018?" alone means nothing). The
document (table rows, then paragraphs) opens every prompt of the document, word for word the
same, so a server's prefix cache shares it.

Tolerated quirks: ``answer`` as a list, a string or a number; ``scale`` missing or null;
``req_clari`` / ``follow_up`` missing (false) or 0/1; ``original_question`` missing or empty
(the question); ``table`` as ``{"table": rows}`` or bare rows, or missing; paragraphs without
``order`` (file order). Refused (DataError naming file, row, field): anything else, e.g. a
file without answers (PACIFIC's test.json), a clarifying question with no reply after it.
"""

from __future__ import annotations

from pathlib import Path

from tasks.datasets.fields import DataError, Style, read_json, text
from tasks.core.registry import loader
from tasks.core.items import Item, item_id

SAMPLE = Path(__file__).parent / "sample.json"
BENCHMARK = "clarify"


def _where(path, d: int, q: int | None = None) -> str:
    return f"{path}: row {d}" + (f" (questions[{q}])" if q is not None else "")


# PACIFIC's wording of its errors (tests and scripts match it); a blank optional field is absent.
STYLE = Style(cannot_read="{path}: cannot read: {error}",
              not_json="{where}: not JSON: line {line} column {column}: {msg}",
              missing="{where}: expected a string, got {type} {value}",
              not_text="{where}: expected a string, got {type} {value}",
              blank="{where}: empty", optional_blank=True)


def _text(value, where: str, field: str, required: bool = True) -> str:
    """The field's text, whitespace collapsed; "" for an absent optional one."""
    return text(value, f"{where}: field {field!r}", required=required, collapse=True,
                style=STYLE) or ""


def _flag(q: dict, key: str, where: str) -> bool:
    v = q.get(key, False)
    if v is None:
        return False
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):  # some exports write 0/1
        return bool(v)
    raise DataError(f"{where}: field {key!r}: expected true or false, got {v!r:.60}")


def _number(x) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _parts(q: dict, where: str) -> tuple[list[str], str]:
    """The answer's spans (a number as its string; empty spans dropped) and its scale."""
    if "answer" not in q:
        raise DataError(f"{where}: field 'answer': missing (PACIFIC's test.json ships without "
                        "answers: use train.json or dev.json)")
    a = q["answer"]
    items = a if isinstance(a, list) else [a]
    parts = []
    for x in items:
        if isinstance(x, bool) or not isinstance(x, (str, int, float)):
            raise DataError(f"{where}: field 'answer': expected strings or numbers, got "
                            f"{type(x).__name__} {x!r:.60}")
        parts.append(_number(x) if isinstance(x, (int, float)) else " ".join(x.split()))
    parts = [p for p in parts if p]
    if not parts:
        raise DataError(f"{where}: field 'answer': empty")
    return parts, _text(q.get("scale"), where, "scale", required=False)


def _answers(q: dict, where: str) -> list[str]:
    """Reference answers as strings: the spans joined, the number, each also with its scale
    ("35,121 thousand"), since a free-form answer usually states the unit. (A multi-span
    answer is scored as its set of spans, ``_answer_spans``; the joined string is what the
    equivalence judge reads.)"""
    parts, scale = _parts(q, where)
    joined = ", ".join(parts)
    out = [joined]
    if scale:
        out.append(f"{joined} {scale}")
    return out


def _answer_spans(q: dict, where: str) -> list[list[str]] | None:
    """A multi-span answer (PACIFIC's, TAT-QA's ``multi-span``: ``["41.6", "38.2"]``) as its
    spans, one list per reference (the spans, and each span with the scale), in
    ``hidden["answer_spans"]``: the reference judge scores such an answer as a set of spans,
    as TAT-QA's metric does. None for a single answer (its hidden dict stays as it was)."""
    parts, scale = _parts(q, where)
    if len(parts) < 2:
        return None
    return [parts] + ([[f"{p} {scale}" for p in parts]] if scale else [])


def _reference(q: dict, where: str) -> dict:
    """The hidden reference fields of a question's answer."""
    spans = _answer_spans(q, where)
    return {"answers": _answers(q, where), **({"answer_spans": spans} if spans else {})}


def _context(doc: dict, where: str) -> str:
    table = doc.get("table")
    rows = table.get("table") if isinstance(table, dict) else table
    lines = []
    if rows is not None:
        if not isinstance(rows, list):
            raise DataError(f"{where}: field 'table.table': expected a list of rows")
        for r, row in enumerate(rows):
            if not isinstance(row, list):
                raise DataError(f"{where}: field 'table.table[{r}]': expected a list of cells")
            cells = [" ".join(str(c).split()) if c is not None else "" for c in row]
            if any(cells):
                # PACIFIC's own reader writes "first cell : the others | ..."; the same here.
                lines.append(f"{cells[0]} : " + " | ".join(cells[1:]) if len(cells) > 1 else cells[0])
    paras = doc.get("paragraphs") or []
    if not isinstance(paras, list):
        raise DataError(f"{where}: field 'paragraphs': expected a list")
    texts = []
    for p, para in enumerate(paras):
        if not isinstance(para, dict):
            raise DataError(f"{where}: field 'paragraphs[{p}]': expected an object")
        order = para.get("order")
        texts.append((order if isinstance(order, int) else p,
                      _text(para.get("text"), where, f"paragraphs[{p}].text", required=False)))
    texts = [t for _, t in sorted(texts, key=lambda x: x[0]) if t]
    if not lines and not texts:
        raise DataError(f"{where}: fields 'table', 'paragraphs': the document has neither")
    out = []
    if lines:
        out.append("Table:\n" + "\n".join(lines))
    if texts:
        out.append("Text:\n" + "\n".join(texts))
    return "\n\n".join(out)


def _prompt(context: str, question: str) -> str:
    return f"Here is a document.\n\n{context}\n\nMy question: {question}"


def _read(path) -> list:
    data = read_json(path, style=STYLE)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON array of documents, got {type(data).__name__}")
    return data


@loader('pacific', sample=SAMPLE)
def load(path) -> list[Item]:
    """Every question of a PACIFIC file as an item, in file order (``source_row`` counts
    questions over the whole file, clarification replies included)."""
    items: list[Item] = []
    flat = 0
    for d, doc in enumerate(_read(path)):
        where = _where(path, d)
        if not isinstance(doc, dict):
            raise DataError(f"{where}: expected an object, got {type(doc).__name__}")
        qs = doc.get("questions")
        if not isinstance(qs, list) or not qs:
            raise DataError(f"{where}: field 'questions': expected a non-empty list")
        context = _context(doc, where)
        for q in qs:
            if not isinstance(q, dict):
                raise DataError(f"{where}: field 'questions': expected objects")
        skip = False  # the current question is the reply to the previous clarification
        for k, q in enumerate(qs):
            w = _where(path, d, k)
            row = flat
            flat += 1
            if skip:
                skip = False
                continue
            uid = q.get("uid")
            if isinstance(uid, int) and not isinstance(uid, bool):
                uid = str(uid)
            uid = _text(uid, w, "uid")
            asked = _text(q.get("question"), w, "question")
            question = _text(q.get("original_question"), w, "original_question",
                             required=False) or asked
            if "req_clari" not in q and "answer" not in q:
                raise DataError(f"{w}: field 'req_clari': missing, and no 'answer' (PACIFIC's "
                                "test.json ships without them: use train.json or dev.json)")
            meta = {"ambiguous": False, "answer_type": q.get("answer_type"),
                    "answer_from": q.get("answer_from"), "follow_up": _flag(q, "follow_up", w)}
            if not _flag(q, "req_clari", w):
                items.append(Item(item_id(BENCHMARK, uid), row, {"question": _prompt(context, question)},
                                  {"question": question, **_reference(q, w)}, meta))
                continue
            if k + 1 >= len(qs):
                raise DataError(f"{w}: field 'req_clari': true, but no clarification reply "
                                "follows in the dialogue")
            reply, wr = qs[k + 1], _where(path, d, k + 1)
            if _flag(reply, "req_clari", wr):
                raise DataError(f"{wr}: field 'req_clari': a clarification answered by another "
                                "clarifying question is not supported")
            clar = q.get("answer")
            clar = ", ".join(str(c) for c in clar) if isinstance(clar, list) else clar
            clar = _text(clar, w, "answer", required=False) if isinstance(clar, str) else ""
            reply_text = _text(reply.get("question"), wr, "question")
            intent = _text(reply.get("original_question"), wr, "original_question")
            meta.update(ambiguous=True, answer_type=reply.get("answer_type"),
                        answer_from=reply.get("answer_from"))
            hidden = {"question": question, "intent": intent, "slots": {"clarification": reply_text},
                      "clarifying_question": clar, **_reference(reply, wr)}
            items.append(Item(item_id(BENCHMARK, uid), row,
                              {"question": _prompt(context, question),
                               "disambiguated": _prompt(context, intent)}, hidden, meta))
            skip = True
    if not items:
        raise DataError(f"{path}: no questions")
    return items
