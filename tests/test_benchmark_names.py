"""Shared code and the shared schema hold no one benchmark's tables, roles or condition names.

A benchmark brings its own through the registry, beside its spec (its tables, the roles its
components declare, its conditions); the floors below it serve every benchmark. A string in
shared code that names one benchmark's table, role or condition would make that code know
the benchmark, as CarryOnBench's queries, intent rewriter and BC/NC/oracle once lived in the
config, the role table, the spec's models and the warehouse's schema.

What a benchmark owns is read from what it registers (nothing is listed here): the tables of
the schema files its package registers and those its ``views.sql`` creates, the roles declared
(as a ``Role``) by components of its package, and its spec's condition names. Shared code is
every ``.py`` of ``tasks/`` outside ``tasks/benchmarks/``, ``flows/``, ``warehouse/`` and
``prompts/``; a string holds a name when it is the name (``"oracle"``), or when it reads like
SQL and holds it as a word (``"... FROM queries"``, ``"... = 'BC'"``). Docstrings are prose
and are not read. A coincidence (a shared component's own word a benchmark also uses) is
allowed only in ``ALLOWED``, with why.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from tasks.bench import builtin_names, load_builtins, load_spec
from tasks.core import registry
from warehouse.schema_file import load as load_schema

ROOT = Path(__file__).resolve().parent.parent
SHARED = ("tasks", "flows", "warehouse", "prompts")
_SQL = re.compile(r"\b(SELECT|FROM|JOIN|INSERT|UPDATE|DELETE|CREATE|TABLE|VIEW|WHERE)\b")

# (module path, name): why a shared module may hold that string. Never widen it to make a
# benchmark's name fit: move the code beside the benchmark instead.
ALLOWED = {
    # The scripted user's move groups (the paper's taxonomy: benign clarification or not),
    # its own arguments; CarryOnBench's conditions are named after them.
    ("tasks/users/scripts.py", "BC"): "the scripted user's move groups",
    ("tasks/users/scripts.py", "NC"): "the scripted user's move groups",
    ("tasks/users/scripted.py", "BC"): "the scripted user's script groups",
    ("tasks/users/scripted.py", "NC"): "the scripted user's script groups",
    # How a call travels (live or in a provider batch), not ClarifyMT's condition.
    ("tasks/gateway/prices.py", "live"): "a price's submission mode",
    ("tasks/engine/check.py", "live"): "the folder of a check's live (not batched) requests",
}


def owned_names() -> dict[str, dict[str, set[str]]]:
    """benchmark -> {"table", "role", "condition"} -> the names only it owns."""
    load_builtins()
    out = {}
    for b in builtin_names():
        spec = load_spec(b)
        package = f"tasks.benchmarks.{b}."
        tables = set()
        for module, path in registry.table_sources():
            if module.startswith(package):
                tables |= set(load_schema(path)["tables"])
        if spec.views is not None:
            sql = (Path(spec.source_path).parent / spec.views.file).read_text()
            tables |= set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", sql))
        roles = {n for n in registry.declared_roles()
                 if (registry.role_owner(n) or "").startswith(package)}
        out[b] = {"table": tables, "role": roles, "condition": set(spec.condition_names)}
    return out


def _strings(tree: ast.AST):
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant) and isinstance(n.body[0].value.value, str)}
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
            yield n


def holds(text: str, name: str) -> bool:
    if text.strip() == name:
        return True
    return bool(_SQL.search(text)) and bool(
        re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", text))


def hits(sources: dict[str, str], owned: dict, allowed=ALLOWED) -> list[str]:
    """One line per string of shared code (``{path: source}``) that holds a benchmark's name."""
    out = []
    for path, source in sorted(sources.items()):
        for node in _strings(ast.parse(source)):
            for bench, kinds in owned.items():
                for kind, names in kinds.items():
                    for name in sorted(names):
                        if (path, name) not in allowed and holds(node.value, name):
                            out.append(f"{path}:{node.lineno}: {bench}'s {kind} {name!r} "
                                       f"in {node.value.strip()[:60]!r}")
    return sorted(set(out))


def shared_sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
            for pkg in SHARED for p in sorted((ROOT / pkg).rglob("*.py"))
            if not p.relative_to(ROOT).parts[:2] == ("tasks", "benchmarks")}


def schema_hits(schemas: dict[str, dict], owned: dict) -> list[str]:
    """One line per table of a shared schema file that a benchmark owns."""
    return sorted(f"{path}: {bench}'s table {t!r}" for path, schema in schemas.items()
                  for bench, kinds in owned.items() for t in kinds["table"] if t in schema["tables"])


def shared_schemas() -> dict[str, dict]:
    """The shared schema and those of shared components (the checklists stage's)."""
    load_builtins()
    out = {"warehouse/schema.json": load_schema()}
    for module, path in registry.table_sources():
        if not module.startswith("tasks.benchmarks."):
            out[str(Path(path).relative_to(ROOT))] = load_schema(path)
    return out


def test_every_benchmark_owns_what_it_registers():
    owned = owned_names()
    assert owned["carryon"]["table"] >= {"queries", "intents", "table2_ci"}
    assert owned["carryon"]["role"] == {"intent_rewriter"}
    assert owned["carryon"]["condition"] == {"BC", "NC", "oracle"}
    assert owned["clarifymt"]["role"] >= {"question_judge", "slot_judge"}


def test_shared_code_holds_no_benchmarks_names():
    found = hits(shared_sources(), owned_names())
    assert not found, ("shared code holds a benchmark's own names (move the code beside the "
                       "benchmark, brought through the registry):\n" + "\n".join(found))
    stale = [k for k in ALLOWED if not (ROOT / k[0]).is_file() or k[1] not in (ROOT / k[0]).read_text()]
    assert not stale, f"ALLOWED names strings that are gone: {stale}"


def test_the_shared_schemas_hold_no_benchmarks_tables():
    found = schema_hits(shared_schemas(), owned_names())
    assert not found, "shared schemas hold a benchmark's tables:\n" + "\n".join(found)


def test_the_rules_bite_on_planted_names():
    """Not vacuous: a planted table in an engine module's SQL, a planted role and condition
    in a stage's code, and a planted table in the shared schema are each caught; a docstring
    and a word in a sentence are not names."""
    owned = owned_names()
    planted = {"tasks/engine/made_up.py": (
        '"""Reads the queries of CarryOnBench (prose: not a name)."""\n'
        'SQL = "SELECT q.query FROM queries q"\n'
        'ROLE = "intent_rewriter"\n'
        'def f(c):\n'
        '    return c.name == "oracle" or c.part == "x" and "the oracle said"\n')}
    assert hits(planted, owned) == [
        "tasks/engine/made_up.py:2: carryon's table 'queries' in 'SELECT q.query FROM queries q'",
        "tasks/engine/made_up.py:3: carryon's role 'intent_rewriter' in 'intent_rewriter'",
        "tasks/engine/made_up.py:5: carryon's condition 'oracle' in 'oracle'"]
    assert hits({"tasks/engine/made_up.py": 'W = "WHERE condition = \'BC\'"\n'}, owned) == [
        "tasks/engine/made_up.py:1: carryon's condition 'BC' in \"WHERE condition = 'BC'\""]
    schema = json.loads(json.dumps(load_schema()))
    schema["tables"]["table2_ci"] = {"columns": [], "primary_key": []}
    assert schema_hits({"warehouse/schema.json": schema}, owned) == [
        "warehouse/schema.json: carryon's table 'table2_ci'"]
