"""The ledger is a composition of aggregate folds (services/domain/fold/aggregate.py): every
event type it folds has exactly one handler, in one fold; every field of the folded state
has exactly one owner; and only the owner's modules write it (read from their source)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from gpuledger import events as ev
from gpuledger.services.domain.fold import ledger as ledger_module
from gpuledger.services.domain.fold.aggregate import handlers_of
from gpuledger.services.domain.fold.ledger import FOLDS, Ledger

FOLD_DIR = Path(ledger_module.__file__).parent
SUB_RECORDS = ("sched", "mig", "agents", "quota", "intake")
"""Ledger fields that are records of fields, each field of them owned on its own."""
FLEET_BOOKERS = {"allocations", "nodes"}
"""The fleet is an aggregate of its own (services/placement) with an atomic API: these folds
book into it (allocations' capacity, nodes' specs and schedulability)."""
MULTI_AGGREGATE: frozenset[type] = frozenset()
"""Event types handled by more than one fold: none (a fold reaches another's fields through
the owner's functions, e.g. `GangPlaced` calls `jobs.placed` and `tenants.book`)."""
MUTATORS = {
    "add", "discard", "remove", "pop", "popitem", "clear", "update", "setdefault",
    "append", "extend", "insert", "set", "apply", "note_fired",
    "allocate", "release", "add_node", "set_schedulable",
}  # fmt: skip


def state_fields() -> set[str]:
    out: set[str] = set()
    probe = Ledger()
    for f in dataclasses.fields(Ledger):
        if f.name in SUB_RECORDS:
            out.update(f"{f.name}.{g.name}" for g in dataclasses.fields(getattr(probe, f.name)))
        else:
            out.add(f.name)
    return out


def owner_of(path: str) -> list[str]:
    return [f.name for f in FOLDS for o in f.owns if path == o or path.startswith(o + ".")]


def test_every_event_type_the_ledger_folds_has_exactly_one_fold():
    # given every event type of the log
    types = [t for t in vars(ev).values() if isinstance(t, type) and issubclass(t, ev.Event)]
    # when the folds' dispatch tables are read
    handled = {t: [f.name for f in FOLDS if t in f.handlers] for t in types}
    # then a folded type has one fold (or is listed as multi-aggregate), and the ledger's
    # table is exactly their union
    for t, folds in handled.items():
        assert len(folds) <= 1 or t in MULTI_AGGREGATE, f"{t.__name__} is folded by {folds}"
    folded = {t for t, folds in handled.items() if folds}
    assert folded == set(handlers_of(FOLDS)) == set(ledger_module._HANDLERS)
    assert len(folded) >= 30  # the submissions, runs, nodes, config, MIG and intake events


def test_two_folds_handling_one_event_type_is_refused():
    jobs, allocations = FOLDS[1], FOLDS[2]
    twice = dataclasses.replace(allocations, handlers={ev.JobSubmitted: lambda ledger, e: None})
    try:
        handlers_of([jobs, twice])
    except ValueError as err:
        assert str(err) == "JobSubmitted is handled by jobs and allocations"
    else:
        raise AssertionError("a second handler of JobSubmitted was accepted")


def test_every_field_of_the_state_has_exactly_one_owner():
    shared = {"fleet"}
    for path in sorted(state_fields() - shared):
        assert len(owner_of(path)) == 1, f"{path} is owned by {owner_of(path) or 'no fold'}"
    owned = {o for f in FOLDS for o in f.owns}
    assert all(o in state_fields() or o in SUB_RECORDS for o in owned), owned - state_fields()


def _chain(node: ast.AST, roots: dict[str, str]) -> str | None:
    """The state path an expression names (`ledger.sched.growable` -> `sched.growable`;
    through a local alias of one, or a `.get(...)`/`.setdefault(...)`/`[k]` of one)."""
    names: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            node, names = node.value, []
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "setdefault")
        ):
            node, names = node.func.value, []
        else:
            break
    if not isinstance(node, ast.Name) or node.id not in roots:
        return None
    base = roots[node.id]
    parts = ([base] if base else []) + names[::-1]
    if parts and parts[0] in SUB_RECORDS:
        return ".".join(parts[:2])
    return parts[0] if parts else None


def writes(tree: ast.AST, root: str = "ledger") -> dict[str, int]:
    """State paths a module writes, with a line of each: assignments, deletions and
    mutating calls on `root`'s fields, directly or through a local alias."""
    out: dict[str, int] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        roots = {root: ""}
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                path = _chain(node.value, roots)
                if isinstance(target, ast.Name) and path is not None:
                    roots[target.id] = path
        for node in ast.walk(fn):
            targets: list[ast.AST] = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in MUTATORS
            ):
                targets = [node.func.value]
            for t in targets:
                elts = t.elts if isinstance(t, ast.Tuple) else [t]
                for el in elts:
                    if isinstance(el, ast.Name):
                        continue  # binding a local name writes nothing
                    path = _chain(el, roots)
                    if path is not None:
                        out.setdefault(path, node.lineno)
    return out


def test_only_a_fields_owner_writes_it():
    # given the source of every fold's modules
    written: dict[str, set[str]] = {}
    for f in FOLDS:
        for module in f.modules:
            tree = ast.parse((FOLD_DIR / f"{module}.py").read_text())
            # when the state paths each writes are read
            for path, line in writes(tree).items():
                written.setdefault(path, set()).add(f.name)
                # then each is the fold's own (the fleet: a fold that books into it)
                ok = f.name in owner_of(path) or (path == "fleet" and f.name in FLEET_BOOKERS)
                assert ok, f"{module}.py:{line} writes {path}, owned by {owner_of(path)}"
    # and every owned field is written by its owner (the declarations are not stale)
    for f in FOLDS:
        for o in f.owns:
            assert any(p == o or p.startswith(o + ".") for p in written), f"{o} is never written"
    # and the façade itself writes nothing: it dispatches and answers queries
    assert writes(ast.parse((FOLD_DIR / "ledger.py").read_text()), root="self") == {}


def test_the_write_reader_sees_writes_through_aliases_and_calls():
    tree = ast.parse(
        "def f(ledger):\n"
        "    fixed = ledger.sched.tenant_fixed_gpu_milli\n"
        "    fixed['t'] = 1\n"
        "    per = ledger.sched.spread_nodes.setdefault('g', {})\n"
        "    per['n'] = 2\n"
        "    ledger.active.discard('a')\n"
        "    ledger.nodes_version += 1\n"
        "    job = ledger.jobs.get('j')\n"
        "    x = ledger.pending\n"
    )
    assert set(writes(tree)) == {
        "sched.tenant_fixed_gpu_milli",
        "sched.spread_nodes",
        "active",
        "nodes_version",
    }
