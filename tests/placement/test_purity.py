"""The placement core imports only stdlib, numpy, msgspec and the reason vocabulary
(`gpuledger.events.reasons`, stdlib enums only), and no clock or randomness."""

import ast
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "services" / "placement"
ALLOWED_THIRD_PARTY = {"numpy", "msgspec"}
ALLOWED_OWN = {"gpuledger.events.reasons"}
FORBIDDEN_STDLIB = {
    "random",
    "time",
    "datetime",
    "logging",
    "os",
    "socket",
    "subprocess",
    "secrets",
    "uuid",
}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Import):
            roots.update(a.name.split(".")[0] for a in n.names)
        elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module not in ALLOWED_OWN:
            roots.add(n.module.split(".")[0])
    return roots


def test_core_modules_import_only_pure_dependencies():
    files = sorted(CORE.glob("*.py"))
    assert len(files) >= 8
    for f in files:
        for root in imported_roots(f):
            assert root not in FORBIDDEN_STDLIB, f"{f.name} imports {root}"
            assert (
                root in sys.stdlib_module_names
                or root in ALLOWED_THIRD_PARTY
                or root == "__future__"
            ), f"{f.name} imports {root}"
