"""The paper's numbers as data: ``tasks/benchmarks/carryon/paper.yaml`` (Table 2, the text of
Figure 22, Tables 3 and 4, with their source), read and validated (a malformed file names the
field), and which target of a run stands for which row of Table 2 (``paper_name:``).
tasks/benchmarks/carryon/report/paper_compare.py sets a run's numbers beside them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

PAPER_FILE = Path(__file__).resolve().parents[1] / "paper.yaml"
# The mixed models' terms and outcomes, as the paper's Tables 3 and 4 give them.
TERMS = (("Intercept", "Intercept"), ("turn1", "Turn-1 score"), ("n_benign_moves", "N benign moves"),
         ("n_turns", "N turns"))
OUTCOMES = (("safety", "mixed_model_harm_max", "conversation safety (harm max)"),
            ("utility", "mixed_model_utility", "conversation utility (%)"))


class PaperDataError(ValueError):
    """The paper's data file is malformed (names the file and the field)."""


@dataclass(frozen=True)
class Paper:
    source: str
    design: dict
    columns: tuple[str, ...]
    table2: dict[str, dict[str, float]]  # row name -> cell -> value
    table2_source: str
    recovery_as_bc_over_oracle: tuple[str, ...]
    domains: tuple[dict, ...]  # {domain, measure, value} or {domain, measure, range: (lo, hi)}
    domains_source: str
    mixed: dict[str, dict]  # safety|utility -> {term: (coef, se), "group_var": v}
    mixed_source: str

    def row_name(self, name) -> str | None:
        """The Table 2 row a ``paper_name`` names (case does not matter), else None."""
        if not isinstance(name, str):
            return None
        for row in self.table2:
            if row.casefold() == name.strip().casefold():
                return row
        return None


@functools.lru_cache(maxsize=4)
def load_paper(path: str | Path = PAPER_FILE) -> Paper:
    """The paper's numbers from ``path`` (validated: a malformed file names the field)."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise PaperDataError(f"{path}: cannot read the paper's numbers: {e}") from None

    def need(cond: bool, field: str, what: str):
        if not cond:
            raise PaperDataError(f"{path}: {field}: {what}")

    need(isinstance(doc, dict), "(top level)", "expected a mapping")
    t2 = doc.get("table2") or {}
    cols = t2.get("columns")
    need(isinstance(cols, list) and cols, "table2.columns", "expected a list of cell names")
    rows = {}
    for name, values in (t2.get("rows") or {}).items():
        need(isinstance(values, list) and len(values) == len(cols)
             and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values),
             f"table2.rows.{name}", f"expected {len(cols)} numbers, one per column")
        rows[str(name)] = {c: float(v) for c, v in zip(cols, values)}
    need(bool(rows), "table2.rows", "no rows")
    domains = []
    for i, d in enumerate((doc.get("domains") or {}).get("values") or []):
        ok = isinstance(d, dict) and isinstance(d.get("domain"), str) and isinstance(d.get("measure"), str)
        rng = d.get("range") if ok else None
        ok = ok and (isinstance(d.get("value"), (int, float))
                     or (isinstance(rng, list) and len(rng) == 2 and rng[0] <= rng[1]))
        need(ok, f"domains.values[{i}]", "expected {domain, measure, value} or {domain, measure, range: [lo, hi]}")
        domains.append({"domain": d["domain"], "measure": d["measure"],
                        **({"range": (float(rng[0]), float(rng[1]))} if rng is not None
                           else {"value": float(d["value"])})})
    mm = doc.get("mixed_models") or {}
    mixed = {}
    for outcome, _, _ in OUTCOMES:
        m = mm.get(outcome)
        need(isinstance(m, dict), f"mixed_models.{outcome}", "missing")
        entry = {}
        for term, _ in TERMS:
            v = m.get(term)
            need(isinstance(v, list) and len(v) == 2, f"mixed_models.{outcome}.{term}",
                 "expected [coefficient, standard error]")
            entry[term] = (float(v[0]), float(v[1]))
        need(isinstance(m.get("group_var"), (int, float)), f"mixed_models.{outcome}.group_var",
             "expected a number")
        entry["group_var"] = float(m["group_var"])
        mixed[outcome] = entry
    return Paper(source=str(doc.get("source") or ""), design=dict(doc.get("design") or {}),
                 columns=tuple(cols), table2=rows, table2_source=str(t2.get("source") or ""),
                 recovery_as_bc_over_oracle=tuple(t2.get("recovery_as_bc_over_oracle") or ()),
                 domains=tuple(domains), domains_source=str((doc.get("domains") or {}).get("source") or ""),
                 mixed=mixed, mixed_source=str(mm.get("source") or ""))


# ----- which target is which row ---------------------------------------------------------
def paper_links(config: dict | None, paper: Paper | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """From the run's config: ({target: Table 2 row}, {target: a paper_name that names no row})."""
    paper = paper or load_paper()
    models = (config or {}).get("models") if isinstance(config, dict) else None
    targets = models.get("targets") if isinstance(models, dict) else None
    links, unknown = {}, {}
    for e in targets if isinstance(targets, list) else []:
        if not isinstance(e, dict) or not (e.get("name") or e.get("model")) or not e.get("paper_name"):
            continue
        name = str(e.get("name") or e.get("model"))
        row = paper.row_name(e["paper_name"])
        if row is None:
            unknown[name] = str(e["paper_name"])
        else:
            links[name] = row
    return links, unknown
