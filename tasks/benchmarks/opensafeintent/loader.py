"""OpenSafeIntent's ``dataset.json`` (github.com/Uppaal/OpenSafeIntent): one JSON array of
prompt sets. Each set fixes one underlying task and asks it three ways (``prompt_benign``,
``prompt_dual_use``, ``prompt_malicious``) plus four paraphrases of the dual-use prompt
(``prompt_dual_use_2`` .. ``prompt_dual_use_5``), with the authors' rationales
(``*_plausible_benign_use``, ``*_meaningful_misuse_risk``) and grouping fields
(``harm_domain``, ``task_type``, ``underlying_task``).

The published prompts were seeded from PKU-SafeRLHF (CC BY-NC 4.0), so the file never ships
with the project: ``load`` reads the path a user gives; ``SAMPLE`` is the team's own file in
the same shape, written on mild topics.

Tolerated (the published file has or may have them): a UTF-8 BOM, extra fields, a null or
empty paraphrase (that condition is simply absent for the set, the engine skips it), the
evaluation files' ``dual_use_paraphrases`` list in place of ``prompt_dual_use_2..5``.
Refused with a DataError naming the file, the 0-based row and the field: anything else.
"""

from __future__ import annotations

from pathlib import Path

from tasks.datasets.fields import DataError, Style, read_json, text
from tasks.core.registry import loader
from tasks.core.items import Item, item_id

BENCHMARK = "opensafeintent"
SAMPLE = Path(__file__).resolve().parent / "sample.json"

# item.prompts key -> the file's field. The three framings are required; the paraphrases not.
FRAMINGS = {"benign": "prompt_benign", "dual_use": "prompt_dual_use",
            "malicious": "prompt_malicious"}
PARAPHRASES = {f"dual_use_{k}": f"prompt_dual_use_{k}" for k in range(2, 6)}
# Grouping fields the report uses; required, since a set without them cannot be placed.
META = ("harm_domain", "task_type", "underlying_task")
# The authors' rationales: what only the judges (never the target) may see. Optional: a
# missing or null one is left out of hidden.
RATIONALES = {
    "benign_plausible_benign_use": "benign_prompt_plausible_benign_use",
    "dual_use_plausible_benign_use": "dual_use_prompt_plausible_benign_use",
    "dual_use_misuse_risk": "dual_use_prompt_meaningful_misuse_risk",
    "malicious_misuse_risk": "malicious_prompt_meaningful_misuse_risk",
}
LIST_FIELD = "dual_use_paraphrases"


# OpenSafeIntent's wording of its errors (tests and scripts match it); a blank optional
# field (a paraphrase, a rationale) is absent.
STYLE = Style(no_file="{path}: no such file (OpenSafeIntent's dataset.json is not shipped: "
                      "give the path of your copy in dataset.path)",
              cannot_read="{path}: cannot read the file: {error}",
              not_json="{where}: not valid JSON (line {line}, column {column}: {msg})",
              missing="{where}: empty (a string is required)",
              not_text="{where}: expected a string, got {type}",
              blank="{where}: empty (a string is required)", optional_blank=True)


def _read(path: Path):
    # utf-8-sig strips a BOM when there is one and reads plain UTF-8 otherwise.
    return read_json(path, encoding="utf-8-sig", style=STYLE)


def _text(path, i, row, field, required: bool) -> str | None:
    """A prompt-like field: a non-empty string, or (when not required) missing/null/blank."""
    where = f"{path}: row {i}: field {field!r}"
    if required and field not in row:
        raise DataError(f"{where}: missing (a string is required)")
    return text(row.get(field), where, required=required, style=STYLE)


def _paraphrases(path, i, row) -> dict[str, str]:
    out = {key: t for key, field in PARAPHRASES.items()
           if (t := _text(path, i, row, field, required=False))}
    listed = row.get(LIST_FIELD)
    if listed is None:
        return out
    if not isinstance(listed, list):
        raise DataError(f"{path}: row {i}: field {LIST_FIELD!r}: expected a list of strings, "
                        f"got {type(listed).__name__}")
    if len(listed) > len(PARAPHRASES):
        raise DataError(f"{path}: row {i}: field {LIST_FIELD!r}: {len(listed)} paraphrases, "
                        f"at most {len(PARAPHRASES)} expected")
    for k, value in enumerate(listed):
        key = f"dual_use_{k + 2}"
        t = text(value, f"{path}: row {i}: field '{LIST_FIELD}[{k}]'", required=False,
                 style=STYLE)
        if t and key in out and out[key] != t:
            raise DataError(f"{path}: row {i}: field '{LIST_FIELD}[{k}]': differs from "
                            f"{PARAPHRASES[key]!r} (two versions of one paraphrase)")
        if t:
            out[key] = t
    return out


def _item(path: Path, i: int, row) -> Item:
    if not isinstance(row, dict):
        raise DataError(f"{path}: row {i}: expected an object with the prompt set's fields, "
                        f"got {type(row).__name__}")
    prompts = {key: _text(path, i, row, field, required=True) for key, field in FRAMINGS.items()}
    prompts.update(_paraphrases(path, i, row))
    meta = {key: _text(path, i, row, key, required=True) for key in META}
    hidden = {key: t for key, field in RATIONALES.items()
              if (t := _text(path, i, row, field, required=False))}
    # The set's identity in its file: its task and its dual-use wording (two sets may share a
    # task with different prompts; a reordered file keeps its ids).
    iid = item_id(BENCHMARK, meta["underlying_task"], prompts["dual_use"])
    return Item(iid, i, prompts, hidden, meta)


@loader('opensafeintent', sample=SAMPLE)
def load(path) -> list[Item]:
    """Every prompt set of an OpenSafeIntent-shaped file, in file order."""
    path = Path(path)
    data = _read(path)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON array of prompt sets (OpenSafeIntent's "
                        f"dataset.json), got a {type(data).__name__}")
    if not data:
        raise DataError(f"{path}: the file holds no prompt sets")
    items = [_item(path, i, row) for i, row in enumerate(data)]
    seen: dict[str, int] = {}
    for it in items:
        if it.item_id in seen:
            raise DataError(f"{path}: row {it.source_row}: field 'prompt_dual_use': repeats row "
                            f"{seen[it.item_id]} (same underlying_task and dual-use prompt)")
        seen[it.item_id] = it.source_row
    return items
