"""No import cycles among gpuledger's modules (events, services, projections, replay).

The graph is read from the source with `ast`, so it counts every import: module-level ones and
the ones deferred into a function body (a deferred import still couples two modules, it only
hides the cycle until some call order breaks it). An edge goes to the most specific module an
import names (`from a.b import c` -> `a.b.c` when that is a module, else `a.b`); the parent
packages' `__init__` run too, but that is Python's packaging, not a dependency we chose."""

from __future__ import annotations

import ast
from pathlib import Path

# gpuledger-namespace: keep-strings  (module names here are repository-relative; the
# installed `gpuledger.` prefix is stripped before comparing)
ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("events", "services", "projections", "replay")
NAMESPACE = "gpuledger."  # the installed name of the four packages


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))}


def _local(name: str) -> str:
    return name[len(NAMESPACE) :] if name.startswith(NAMESPACE) else name


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The gpuledger modules that module NAME (file PATH) imports, anywhere in its body."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()

    def target(mod: str) -> str | None:
        while mod and mod not in known:
            mod = mod.rpartition(".")[0]
        return mod or None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                t = target(_local(alias.name))
                if t:
                    out.add(t)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = _local(node.module or "")
            for alias in node.names:
                t = target(f"{mod}.{alias.name}") if f"{mod}.{alias.name}" in known else target(mod)
                if t:
                    out.add(t)
    out.discard(name)
    return out


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = modules(root)
    known = set(mods)
    return {m: imports_of(m, p, known) for m, p in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(found)


def test_there_is_no_import_cycle_among_gpuledger_modules():
    assert cycles(graph()) == []


def subsystem(module: str) -> str:
    """events, projections, replay, replay.bench, or services.<package> (services/roles.py is
    its own). The benchmark harnesses (replay.bench) sit above every layer, projections included."""
    parts = module.split(".")
    if parts[:2] == ["replay", "bench"]:
        return "replay.bench"
    return ".".join(parts[:2]) if parts[0] == "services" and len(parts) > 1 else parts[0]


def subsystem_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, deps in g.items():
        out.setdefault(subsystem(m), set()).update(
            subsystem(d) for d in deps if subsystem(d) != subsystem(m)
        )
    return out


def test_there_is_no_cycle_between_subsystems():
    """Stricter than modules: replay and projections, or two services, never need each other."""
    assert cycles(subsystem_graph(graph())) == []


def test_the_graph_sees_every_module_and_function_level_imports():
    g = graph()
    assert {"events.catalog", "services.cli.main", "replay.logio", "projections.store"} <= set(g)
    assert "services.cli.up" in g["services.cli.main"]


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "replay" / "a.py").write_text("from projections.b import f\n")
    (tmp_path / "projections" / "b.py").write_text("def f():\n    from gpuledger.replay import a\n")
    (tmp_path / "services" / "c.py").write_text("from . import d\n")
    (tmp_path / "services" / "d.py").write_text("import gpuledger.services.c as c\n")
    assert cycles(graph(tmp_path)) == [["projections.b", "replay.a"], ["services.c", "services.d"]]


def test_a_cycle_between_subsystems_is_found_even_without_a_module_cycle(tmp_path):
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "replay" / "logio.py").write_text("")
    (tmp_path / "replay" / "player.py").write_text("from projections.store import wait\n")
    (tmp_path / "projections" / "store.py").write_text("from replay.logio import read_log\n")
    g = graph(tmp_path)
    assert cycles(g) == []
    assert cycles(subsystem_graph(g)) == [["projections", "replay"]]


def test_only_the_bench_command_imports_the_benchmark_harnesses():
    """The harnesses (replay.bench) sit above every layer: no core, projection or replay module
    imports them, only the `gpuledger bench` command (and the harnesses each other)."""
    importers = {
        m
        for m, deps in graph().items()
        if not m.startswith("replay.bench") and any(d.startswith("replay.bench") for d in deps)
    }
    assert importers == {"services.cli.bench"}


def test_the_fleet_layers_import_downward_only():
    """index <- memo <- search <- trial <- fleet: each layer of the placement fleet imports
    only the layers below it."""
    layers = ["index", "memo", "search", "trial", "fleet"]
    g = graph()
    for i, layer in enumerate(layers):
        above = {f"services.placement.{m}" for m in layers[i + 1 :]}
        assert not g[f"services.placement.{layer}"] & above, layer
