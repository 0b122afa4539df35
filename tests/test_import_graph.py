"""The project's own modules import one another without cycles.

A static analysis (``ast``, nothing is imported) over every ``.py`` file under flows/, tasks/,
warehouse/ and prompts/. ``pkg/__init__.py`` is the module ``pkg``. The edges:

- ``import a.b.c`` depends on ``a.b.c`` (the longest prefix that is a project module).
- ``from a.b import c`` depends on ``a.b.c`` when that is a module (a submodule import), else
  on ``a.b`` (a name defined in, or re-exported by, ``a/b.py`` or ``a/b/__init__.py``).
- Relative imports are resolved against the importing module's package, then as above.
- Imports at any depth count, function-local ones included: an import moved into a function
  to dodge a cycle is still a cycle in the design. The body of ``if TYPE_CHECKING:``
  (annotations only, never executed) is not an edge for the cycle check (an annotation cannot
  make an import fail); the floor rules below count it (``type_only=True``): an annotation
  that names a module above is still an arrow up in the design.

The rule for packages: importing ``pkg.sub`` also executes ``pkg/__init__.py``, but that
implicit parent import is not an edge. ``pkg/__init__`` runs before ``pkg.sub``, and a
submodule that does not use names from its package's ``__init__`` does not depend on them;
counting the implicit edge would make every ``__init__`` that re-exports from a submodule a
"cycle" with that submodule (and with every sibling the submodule imports). A real use of
``__init__``'s names (``from pkg import name``, ``name`` not a submodule) is an edge to ``pkg``.

Dynamic imports (``importlib.import_module`` of a computed name: the plugin registries) are
not seen.
"""

from __future__ import annotations

import pytest

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("flows", "tasks", "warehouse", "prompts")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _project_modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_only: bool = False):
    """Every Import/ImportFrom node at any depth; ``if TYPE_CHECKING:`` bodies only with
    ``type_only``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_only:
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _longest_module(name: str, modules) -> str | None:
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _edges(name: str, path: Path, modules, type_only: bool = False) -> set[str]:
    is_pkg = path.name == "__init__.py"
    deps = set()
    for node in _imports(ast.parse(path.read_text(), filename=str(path)), type_only):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            targets = []
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.append(sub if sub in modules else source)
        for target in targets:
            found = _longest_module(target, modules)
            if found is not None and found != name:
                deps.add(found)
    return deps


def import_graph(type_only: bool = False) -> dict[str, set[str]]:
    modules = _project_modules()
    return {name: _edges(name, path, modules, type_only) for name, path in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    out.append(sorted(component))
    return out


def test_scc_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert sorted(c for c in strongly_connected(graph) if len(c) > 1) == [["a", "b", "c"]]


def test_edge_rules(tmp_path):
    modules = {"p", "p.a", "p.b", "p.c", "p.d", "p.q", "p.q.x", "other"}
    src = tmp_path / "x.py"
    src.write_text(
        "import p.a\n"
        "from p import b, NAME\n"  # b: a submodule; NAME: defined in p/__init__
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from p import c\n"
        "else:\n"
        "    import other\n"
        "def f():\n"
        "    from .. import d\n")  # function-local and relative, from p.q.x
    assert _edges("p.q.x", src, modules) == {"p.a", "p.b", "p", "other", "p.d"}
    assert _edges("p.q.x", src, modules, type_only=True) == {"p.a", "p.b", "p", "other", "p.d",
                                                             "p.c"}
    src.write_text("from . import x\nfrom .x import y\n")  # as p/q.py: "." is p, no p.x
    assert _edges("p.q", src, modules) == {"p"}
    pkg = tmp_path / "__init__.py"
    pkg.write_text("from . import x\nfrom .x import y\n")  # as p/q/__init__.py: "." is p.q
    assert _edges("p.q", pkg, modules) == {"p.q.x"}


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 50  # the walk found the project
    cycles = [c for c in strongly_connected(graph) if len(c) > 1]
    message = "\n".join(
        f"cycle {i}: " + ", ".join(f"{m} -> [{', '.join(sorted(graph[m] & set(c)))}]" for m in c)
        for i, c in enumerate(cycles, 1))
    assert not cycles, f"{len(cycles)} import cycle(s) among the project's modules:\n{message}"


# The layers below the benchmarks (docs/ARCHITECTURE.md): they serve every benchmark and
# import none, so a benchmark's code is found beside its spec and nowhere else.
BELOW_BENCHMARKS = ("tasks.core", "tasks.engine", "tasks.stages", "tasks.judges", "tasks.users",
                    "tasks.targets", "tasks.datasets", "tasks.gateway", "warehouse")


def test_the_layers_below_the_benchmarks_import_none():
    graph = import_graph()
    upward = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                    if m.startswith(BELOW_BENCHMARKS) and d.startswith("tasks.benchmarks"))
    assert not upward, "imports of a benchmark from below the benchmarks:\n" + "\n".join(upward)


# The gateway's floor (docs/ARCHITECTURE.md, "Layers"): it sits on the ground floor and takes
# resolved model entries (tasks/model_entry.py: ModelSpec, GatewayConfig, api_key_for), never
# the config that builds them. What it may reach, through imports at any depth and type-only
# ones included: itself, the model entry, and tasks/ops/ (process helpers beside the layers:
# Ctrl-C, parent death, the temporary Prefect server). Everything else is a floor above it
# (tasks.config, the engine, the components, the stages, the report, the benchmarks, flows/)
# or one it has no use for (warehouse/: a batch is handed the warehouse, it imports none).
# Reached, not only imported: an ops helper that imported the config would carry the gateway
# up with it.
GATEWAY = "tasks.gateway"
GATEWAY_STANDS_ON = (GATEWAY, "tasks.model_entry", "tasks.ops")


def _under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def arrows_up(graph: dict[str, set[str]], floor: str, stands_on) -> list[str]:
    """One line per import that leaves what the ``floor`` stands on, from anywhere the floor's
    modules reach, each with the shortest chain that reaches it (``a -> b -> c``); [] if none."""
    chain = {m: [m] for m in graph if _under(m, [floor])}
    queue = sorted(chain)
    while queue:  # breadth first from every module of the floor at once: shortest chains
        module = queue.pop(0)
        for dep in sorted(graph.get(module, ())):
            if dep not in chain and _under(dep, stands_on):
                chain[dep] = chain[module] + [dep]
                queue.append(dep)
    return sorted(" -> ".join(chain[m] + [dep]) for m in chain for dep in graph.get(m, ())
                  if not _under(dep, stands_on))


def test_the_gateway_imports_nothing_above_it():
    graph = import_graph(type_only=True)
    assert any(_under(m, [GATEWAY]) for m in graph)  # the walk found the gateway
    upward = arrows_up(graph, GATEWAY, GATEWAY_STANDS_ON)
    assert not upward, ("the gateway reaches modules above its floor (it takes resolved "
                        "entries from tasks.model_entry):\n" + "\n".join(upward))


@pytest.mark.slow  # one of the fast suite's slowest (kept under 5 min on 2 cores)
def test_the_gateway_rule_fails_on_an_arrow_up(tmp_path):
    """The check above is not vacuous: a made-up gateway module that names the config in an
    annotation only and the engine inside a function, then a gateway module that reaches the
    engine through a helper beside the layers."""
    modules = {*_project_modules(), "tasks.gateway.made_up"}
    src = tmp_path / "made_up.py"
    src.write_text("from typing import TYPE_CHECKING\n"
                   "if TYPE_CHECKING:\n"
                   "    from tasks.config import ModelSpec\n"
                   "def f():\n"
                   "    from tasks.core import registry\n")
    graph = import_graph(type_only=True)
    graph["tasks.gateway.made_up"] = _edges("tasks.gateway.made_up", src, modules, type_only=True)
    assert arrows_up(graph, GATEWAY, GATEWAY_STANDS_ON) == [
        "tasks.gateway.made_up -> tasks.config",
        "tasks.gateway.made_up -> tasks.core.registry"]

    graph = import_graph(type_only=True)
    graph["tasks.ops.made_up"] = {"tasks.core.registry"}
    graph["tasks.gateway.client"] = graph["tasks.gateway.client"] | {"tasks.ops.made_up"}
    assert arrows_up(graph, GATEWAY, GATEWAY_STANDS_ON) == [
        "tasks.gateway.client -> tasks.ops.made_up -> tasks.core.registry"]


# The floors of the house, bottom to top: docs/ARCHITECTURE.md, "Layers", draws exactly this.
# A module may import its own floor and the floors below, through imports at any depth,
# function-local and type-only ones included (``import_graph(type_only=True)``): an import
# moved into a function or under ``if TYPE_CHECKING:`` still says the module needs what is
# above it, and the arrow is in the design whether or not it runs at import time. A module
# belongs to the floor of its longest listed prefix; ``tasks`` and the floors' package roots
# are exact names, so a new module nobody placed fails ``test_every_module_has_a_floor``.
# Within a floor any import goes (the cycle test above still applies).
FLOORS = (
    # ground: what every part shares and no part owns: the registry, items, the spec's models,
    # what a stage is, sample keys, the user, target and judge protocols and a panel's votes
    # (tasks/core/); resolved model entries; the errors and
    # limits every reader of a file or of model text raises or applies; the role table; the
    # dataset readers; the prompt renderer; and tasks/ops/ (processes and servers), which
    # imports nothing of the project beyond itself and sits beside the layers in the drawing.
    ("ground", ("tasks.core", "tasks.model_entry", "tasks.config_error", "tasks.untrusted",
                "tasks.input_files", "tasks.roles", "tasks.datasets", "prompts", "tasks.ops")),
    # the only door to models (its own, stricter rule above: no config, no warehouse).
    ("gateway", ("tasks.gateway",)),
    ("warehouse", ("warehouse",)),
    # the built-in components: user and target policies, judges (their protocols are on the
    # ground floor, tasks/core/users.py, targets.py, judges.py, votes.py).
    ("components", ("tasks.users", "tasks.targets", "tasks.judges")),
    # the run's config (it builds the resolved model entries) and the spec loader, which
    # imports a spec's components by name through the registry, never by import.
    ("config", ("tasks.config", "tasks.bench", "tasks.model_env", "tasks.model_keys")),
    # the loops and what drives them: play, verdicts, plan, the stage skeleton, the run
    # context and memos (tasks/engine/), the built-in stages, the report, judge validation,
    # and the export of a run (it reads any benchmark's rows through its spec, like the report).
    ("loops", ("tasks.engine", "tasks.stages", "tasks.report", "tasks.validation",
               "tasks.export")),
    ("benchmarks", ("tasks.benchmarks",)),
    # composition only: the Prefect flows and the command line.
    ("flows and CLI", ("flows",)),
)
# Package roots that hold nothing but the floors: their own __init__ sits on the ground floor.
ROOTS = ("tasks",)
# Arrows up that are allowed for now, each with why: none. Add ("from", "to") pairs here only
# with a comment saying why the import cannot go yet; never widen a floor instead.
ALLOWED_UP: tuple[tuple[str, str], ...] = ()


def floor_of(module: str, floors=FLOORS) -> int | None:
    """The index in ``floors`` of the floor whose longest prefix holds ``module``."""
    if module in ROOTS:
        return 0
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(floors):
        for prefix in prefixes:
            if _under(module, [prefix]) and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best


def arrows_up_floors(graph: dict[str, set[str]], floors=FLOORS, allowed=()) -> list[str]:
    """One line per import of a module on a higher floor than the importer's, unless allowed."""
    out = []
    for module in sorted(graph):
        here = floor_of(module, floors)
        for dep in sorted(graph[module]):
            there = floor_of(dep, floors)
            if here is not None and there is not None and there > here \
                    and (module, dep) not in allowed:
                out.append(f"{module} [{floors[here][0]}] -> {dep} [{floors[there][0]}]")
    return out


def test_every_module_has_a_floor():
    graph = import_graph(type_only=True)
    unplaced = sorted(m for m in graph if floor_of(m) is None)
    assert not unplaced, "modules on no floor (add them to FLOORS):\n" + "\n".join(unplaced)


def test_no_import_runs_up_a_floor():
    graph = import_graph(type_only=True)
    upward = arrows_up_floors(graph, allowed=ALLOWED_UP)
    assert not upward, ("imports that run up a floor (docs/ARCHITECTURE.md, Layers): move the "
                        "code to the floor it belongs on:\n" + "\n".join(upward))
    stale = [pair for pair in ALLOWED_UP if pair[1] not in graph.get(pair[0], ())]
    assert not stale, f"ALLOWED_UP names imports that are gone: {stale}"


# The loops and the config reach the components a spec names through the registry (by name,
# from the spec), never by importing them: what every component of a kind follows (the user,
# target and judge protocols, a panel's votes, the move checker's role) is on the ground floor
# (tasks/core/), so nothing above the components imports one. A loop that imported a component
# (tasks.judges.benutil, tasks.users.scripted) would make the engine know a benchmark's parts.
# The benchmarks may: a benchmark's own code uses the components it is made of.
def direct_component_imports(graph: dict[str, set[str]], floors=FLOORS) -> list[str]:
    """One line per import of a components-floor module by a module above it, benchmarks and
    modules outside ``tasks`` excepted."""
    components = next(i for i, (name, _) in enumerate(floors) if name == "components")
    return sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                  if (floor_of(m, floors) or 0) > components and _under(m, ["tasks"])
                  and not _under(m, ["tasks.benchmarks"]) and floor_of(d, floors) == components)


def test_the_loops_reach_components_only_through_the_registry():
    direct = direct_component_imports(import_graph(type_only=True))
    assert not direct, ("the loops import a component instead of finding it in the registry "
                        "(move what they share to tasks/core/):\n" + "\n".join(direct))
    # Not vacuous: the verdicts loop naming a judge in an annotation only is caught.
    graph = import_graph(type_only=True)
    graph["tasks.engine.verdicts"] = graph["tasks.engine.verdicts"] | {"tasks.judges.benutil"}
    assert direct_component_imports(graph) == ["tasks.engine.verdicts -> tasks.judges.benutil"]


def test_the_floor_rule_fails_on_an_arrow_up(tmp_path):
    """The floor rule is not vacuous: a made-up graph with one arrow up fails it, however the
    import is written (a component that needs a loop, in an annotation only), and an
    allow-list entry is the only thing that lets it pass."""
    floors = (("ground", ("core",)), ("components", ("comp",)), ("loops", ("loop",)))
    graph = {"core.registry": set(), "comp.user": {"core.registry"},
             "loop.play": {"comp.user", "core.registry"}}
    assert arrows_up_floors(graph, floors) == []
    graph["comp.user"] = graph["comp.user"] | {"loop.play"}
    assert arrows_up_floors(graph, floors) == ["comp.user [components] -> loop.play [loops]"]
    assert arrows_up_floors(graph, floors, allowed={("comp.user", "loop.play")}) == []

    # The same on the project's own graph: a made-up component module whose only import of
    # the engine's play loop is type-only, and another whose import is function-local.
    modules = _project_modules()
    src = tmp_path / "made_up.py"
    src.write_text("from typing import TYPE_CHECKING\n"
                   "if TYPE_CHECKING:\n"
                   "    from tasks.engine.episode import Played\n"
                   "def f():\n"
                   "    from tasks.benchmarks.carryon import stages\n")
    graph = import_graph(type_only=True)
    graph["tasks.users.made_up"] = _edges("tasks.users.made_up", src, modules, type_only=True)
    assert arrows_up_floors(graph) == [
        "tasks.users.made_up [components] -> tasks.benchmarks.carryon.stages [benchmarks]",
        "tasks.users.made_up [components] -> tasks.engine.episode [loops]"]
