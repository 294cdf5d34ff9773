"""Import direction: pure cores (events, deciders, domain, placement) never import a shell,
the bus, the database, logging, or anything that reads the clock or randomness."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "nats", "duckdb", "structlog", "pynvml", "asyncio", "subprocess", "socket", "time", "datetime",
    "random", "secrets", "uuid", "os", "logging", "services.runtime", "services.cli", "projections",
    "replay", "yaml",
}
CORE = sorted(
    [*(ROOT / "events").rglob("*.py"), *(ROOT / "services" / "domain").rglob("*.py"),
     *(ROOT / "services" / "placement").rglob("*.py"), *(ROOT / "services").glob("*/decider.py"),
     ROOT / "services" / "preemption" / "victims.py", ROOT / "services" / "preemption" / "rules.py",
     ROOT / "services" / "scheduler" / "queue.py", ROOT / "services" / "scheduler" / "pending.py",
     ROOT / "services" / "node_agent" / "simulated.py"]
)
EVENTS_ALLOWED = {"msgspec", "typing", "re", "hashlib", "collections", "enum", "__future__", "events"}


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def violates(name: str, forbidden: set[str]) -> bool:
    return any(name == f or name.startswith(f + ".") for f in forbidden)


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ROOT)))
def test_core_modules_import_no_shell_io_clock_or_randomness(path):
    bad = sorted(n for n in imported(path) if violates(n, FORBIDDEN))
    assert bad == [], f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("path", sorted((ROOT / "events").rglob("*.py")), ids=lambda p: p.name)
def test_the_event_contract_imports_msgspec_and_the_standard_library_only(path):
    bad = sorted(n for n in imported(path) if n.split(".")[0] not in EVENTS_ALLOWED)
    assert bad == [], f"{path.name} imports {bad}"


def test_the_check_catches_a_forbidden_import(tmp_path):
    sample = tmp_path / "decider.py"
    sample.write_text("import time\nfrom services.runtime.bus import Bus\n")
    assert {n for n in imported(sample) if violates(n, FORBIDDEN)} == {"time", "services.runtime.bus"}
