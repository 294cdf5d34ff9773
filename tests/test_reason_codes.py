"""Reason codes only through the enums of `events.reasons`: no bare code string in core code.

A code written as a string literal (`"Priority"`) escapes the closed vocabulary: a typo is a
new code on the wire, and nobody can find every producer of a code by its name. The scan
reads the source with `ast` (events/, services/, projections/): a string constant whose value
is a code of any reason enum is refused outside `events/reasons.py` (where the codes are
defined), docstrings, `__all__` (where the same word names a class) and lines marked
`# prose, not a code` (a word shown to people that happens to spell a code). The constructors of
refusals, rejections and placement failures must take their code from an enum even when the
code is not (yet) in one."""

from __future__ import annotations

import ast
import enum
from pathlib import Path

import pytest

from gpuledger.events import reasons

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("events", "services", "projections")
DEFINED_IN = ROOT / "events" / "reasons.py"
CODE_TAKERS = {"Refusal", "Refused", "Rejection", "RequestRefusal"}
"""Constructors whose code argument must be an enum member, never a literal."""
PROSE = "# prose, not a code"


def reason_codes() -> set[str]:
    """Every value of every reason enum (`JobState` is a state, not a reason)."""
    return {
        member.value
        for obj in vars(reasons).values()
        if isinstance(obj, type)
        and issubclass(obj, enum.StrEnum)
        and obj is not enum.StrEnum
        and obj is not reasons.JobState
        for member in obj
    }


def _exempt(tree: ast.AST) -> set[int]:
    """Ids of the constants that are docstrings or `__all__` entries."""
    out: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            out.add(id(body[0].value))
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            out.update(id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant))
    return out


def bare_codes(text: str, rel: str, codes: set[str]) -> list[str]:
    """`rel:line: 'Code'` for each bare reason code in the source `text` of file `rel`."""
    tree = ast.parse(text, rel)
    exempt = _exempt(tree)
    lines = text.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in CODE_TAKERS:
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        if arg.value.isidentifier() and arg.value[:1].isupper():
                            found.append(f"{rel}:{arg.lineno}: {arg.value!r} given to {name}")
                        break
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in codes
            and id(node) not in exempt
            and PROSE not in lines[node.lineno - 1]
        ):
            found.append(f"{rel}:{node.lineno}: {node.value!r}")
    return sorted(set(found))


def core_files() -> list[Path]:
    return [p for pkg in SCANNED for p in sorted((ROOT / pkg).rglob("*.py")) if p != DEFINED_IN]


def test_the_vocabulary_is_read_from_the_enums():
    codes = reason_codes()
    assert {"Resources", "Priority", "InvalidSpec", "WrongNode", "NodeLost"} <= codes
    assert "running" not in codes


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_bare_reason_code_in_core_modules(path):
    assert bare_codes(path.read_text(), str(path.relative_to(ROOT)), reason_codes()) == []


def test_the_scan_finds_a_bare_code_and_spares_docstrings_and_all():
    text = (
        '"""Docstring naming Priority is fine."""\n'
        '__all__ = ["Resources"]\n'
        'x = "Priority"\n'
        'y = Refusal("NotAnEnumCodeYet", "message")\n'
        "z = Refusal(FoldRefusal.WrongNode, 'Resources are fine in a message')\n"
        'verb = "Preempted"  # prose, not a code\n'
    )
    assert bare_codes(text, "services/probe.py", reason_codes()) == [
        "services/probe.py:3: 'Priority'",
        "services/probe.py:4: 'NotAnEnumCodeYet' given to Refusal",
    ]
