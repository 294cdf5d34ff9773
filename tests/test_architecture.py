"""Import direction: events <- service cores <- shells (cli, runtime, node-agent I/O), replay and
projections. A core (the event contract, domain, placement and every service's deciding code)
never imports a shell, the bus, the database, logging, or anything that reads the clock or
randomness.

The cores are derived from the file tree: every module of the core packages is a core unless it
is listed in SHELLS, so a new module is checked without anyone remembering to add it."""

import ast
from pathlib import Path

import pytest

# gpuledger-namespace: keep-strings  (module names here are repository-relative; the
# installed `gpuledger.` prefix is stripped before comparing)
ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "gpuledger."  # the installed name of the repository's top-level packages
CORE_PACKAGES = [
    "events",
    "services/domain",
    "services/placement",
    "services/admission",
    "services/quota",
    "services/scheduler",
    "services/preemption",
    "services/node_agent",
]
# Modules inside the core packages that are shells: they touch processes, files, hardware or ids.
SHELLS = {
    "services/node_agent/agent.py",  # the node agent's NATS shell
    "services/node_agent/checkpoint.py",  # runs inside a job: files, signals, clock
    "services/node_agent/executor.py",  # starts member processes
    "services/node_agent/member_wrapper.py",  # the process wrapped around a member
    "services/node_agent/nvml_discovery.py",  # reads the GPUs through NVML
    "services/node_agent/topology.py",  # NVML topology and GPU uuids
    "services/node_agent/telemetry.py",  # NVML utilisation samples
    "services/node_agent/xid.py",  # NVML XID events
}
SHELL_PACKAGES = {"services.runtime", "services.cli", "services.roles", "projections", "replay"}
FORBIDDEN = {
    "nats",
    "duckdb",
    "structlog",
    "pynvml",
    "asyncio",
    "subprocess",
    "socket",
    "time",
    "datetime",
    "random",
    "secrets",
    "uuid",
    "os",
    "logging",
    "yaml",
    *SHELL_PACKAGES,
    *(s.removesuffix(".py").replace("/", ".") for s in SHELLS),
}
CALENDAR = {
    "services/domain/policy/schedules.py": {"datetime"},
    "services/domain/inputs/reservations.py": {"datetime"},
}
"""Cores that may import `datetime` for calendar arithmetic (cron times in an IANA zone: the
cron library takes datetimes; a configured reservation's ISO instants with their zone), but
never read the clock (checked below)."""
CLOCK_CALLS = {"now", "today", "utcnow", "time", "monotonic", "fromtimestamp"}
EVENTS_ALLOWED = {
    "msgspec",
    "typing",
    "re",
    "hashlib",
    "collections",
    "enum",
    "__future__",
    "events",
}


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def core_modules() -> list[Path]:
    found = {p for pkg in CORE_PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return sorted(p for p in found if str(p.relative_to(ROOT)) not in SHELLS)


def imported(path: Path) -> set[str]:
    """Every module name PATH imports (anywhere in its body; relative imports resolved; the
    installed `gpuledger.` prefix removed)."""
    names: set[str] = set()
    here = module_of(path) if path.is_relative_to(ROOT) else path.stem
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                names.add(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module:
                names.add(node.module)
    return {n[len(NAMESPACE) :] if n.startswith(NAMESPACE) else n for n in names}


def violates(name: str, forbidden: set[str]) -> bool:
    return any(name == f or name.startswith(f + ".") for f in forbidden)


def test_the_core_list_is_derived_from_the_tree_and_covers_every_decider():
    cores = {str(p.relative_to(ROOT)) for p in core_modules()}
    for must in [
        "services/preemption/outlook.py",
        "services/scheduler/reservation.py",
        "services/preemption/victims.py",
        "services/domain/policy/queue.py",
        "services/node_agent/simulated.py",
        "events/catalog.py",
    ]:
        assert must in cores
    decider_files = {str(p.relative_to(ROOT)) for p in (ROOT / "services").glob("*/decider.py")}
    assert decider_files <= cores
    assert all((ROOT / s).exists() for s in SHELLS), "SHELLS names a file that is gone"


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_modules_import_no_shell_io_clock_or_randomness(path):
    allowed = CALENDAR.get(str(path.relative_to(ROOT)), set())
    bad = sorted(n for n in imported(path) if violates(n, FORBIDDEN - allowed))
    assert bad == [], f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("rel", sorted(CALENDAR))
def test_a_calendar_core_reads_no_clock(rel):
    tree = ast.parse((ROOT / rel).read_text())
    calls = {
        n.func.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    }
    assert not calls & CLOCK_CALLS, f"{rel} calls {sorted(calls & CLOCK_CALLS)}"


@pytest.mark.parametrize("path", sorted((ROOT / "events").rglob("*.py")), ids=lambda p: p.name)
def test_the_event_contract_imports_msgspec_and_the_standard_library_only(path):
    bad = sorted(n for n in imported(path) if n.split(".")[0] not in EVENTS_ALLOWED)
    assert bad == [], f"{path.name} imports {bad}"


def test_the_check_catches_a_forbidden_import(tmp_path):
    sample = tmp_path / "decider.py"
    sample.write_text(
        "import time\nfrom gpuledger.services.runtime.bus import Bus\n"
        "def f():\n    from services.node_agent.executor import run\n"
    )
    assert {n for n in imported(sample) if violates(n, FORBIDDEN)} == {
        "time",
        "services.runtime.bus",
        "services.node_agent.executor",
    }
