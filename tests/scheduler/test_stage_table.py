"""The stage table as a specification: given `stages.STAGES`, then every pending reason is
owned by exactly one source (a stage, or the placement engine's `UNPLACEABLE` rules), every
reason a stage also gives is owned by some source, every stage has its own test module, and
the scheduler stays small (a `Scheduler` of at most 5 methods, no file over 300 lines)."""

import inspect
from pathlib import Path

from gpuledger.events.reasons import PendingReason
from gpuledger.services.placement.reasons import UNPLACEABLE, gang_incomplete
from gpuledger.services.scheduler import decider
from gpuledger.services.scheduler.stages import OWNER, STAGES

ROOT = Path(__file__).resolve().parents[2]
PLACEMENT_DOCS = " ".join(inspect.getdoc(r) or "" for r in (*UNPLACEABLE, gang_incomplete))


def placement_owns(code: str) -> bool:
    return f"`{code}`" in PLACEMENT_DOCS


def test_every_pending_reason_belongs_to_exactly_one_stage_or_to_placement():
    owners = [code for s in STAGES for code in s.reasons]
    assert len(owners) == len(set(owners)), "a reason owned by two stages"
    for code in PendingReason:
        assert (code in OWNER) != placement_owns(code), code
    for s in STAGES:
        for code in s.gives:
            assert code in OWNER or placement_owns(code), (s.name, code)


def test_every_stage_has_a_name_a_doc_and_its_own_test_module():
    assert len({s.name for s in STAGES}) == len(STAGES)
    for s in STAGES:
        assert s.doc.strip(), s.name
        assert any((s.gate, s.cap, s.exclude, s.explain, s.book, s.wakeup)), s.name
        assert (ROOT / "tests" / "scheduler" / "stages" / f"test_{s.name}.py").exists(), s.name


def test_the_scheduler_is_small():
    methods = [n for n, v in vars(decider.Scheduler).items() if inspect.isfunction(v)]
    assert len(methods) <= 5, methods
    for path in sorted((ROOT / "services" / "scheduler").rglob("*.py")):
        assert len(path.read_text().splitlines()) <= 300, path
