"""Deciding and folding leave no reference cycles behind.

Replays and rebuilds run with Python's cyclic collector paused (services/runtime/gctune.py):
without cycles, reference counting frees everything, and the collector's passes only walk the
growing state. That holds only while no decider, fold or scorer makes a cycle (a recursive
closure does, as `fair_shares` did until issue 15): these specifications keep it so.

Given example scenarios that preempt, reclaim, re-geometry MIG GPUs and follow schedules, and
a slice of the openb trace with few nodes (jobs queue and are preempted), when they are
simulated (a second time: first uses leave one-off cycles) with every unreachable object
kept, then there is none.
"""

from __future__ import annotations

import gc
from collections import Counter

import pytest

from gpuledger import events as ev
from gpuledger.services.domain.fold.ledger import spec_differences
from gpuledger.services.runtime.gctune import collector_paused
from tests.replay.test_decisions_unchanged import openb_digest, scenario_digest

EXAMPLES = [
    "backfill",
    "day-night",
    "mig-regeometry",
    "preempt-batch",
    "runai-reclaim",
    "starving-gang",
    "thrashing",
    "usage-decay",
]


def _cycles_left_by(run) -> Counter:
    """Run `run()` and return the types of the objects only the cyclic collector could free.
    It runs once before: first uses leave one-off cycles (msgspec inspecting a type). A
    large simulation freezes what is alive at its end (`collector_paused(freeze_above=...)`),
    garbage included: unfrozen here, or the collector would never see it."""
    run()
    gc.unfreeze()
    gc.collect()
    flags = gc.get_debug()
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    try:
        run()
        gc.unfreeze()
        gc.collect()
        found = Counter(getattr(o, "__qualname__", None) or type(o).__name__ for o in gc.garbage)
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()
    return found


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_scenario_replay_leaves_no_cycles(name: str) -> None:
    assert _cycles_left_by(lambda: scenario_digest(name)) == Counter()


def test_an_openb_replay_with_queueing_and_preemption_leaves_no_cycles() -> None:
    assert _cycles_left_by(lambda: openb_digest(6)) == Counter()


def test_the_check_can_fail() -> None:
    def cyclic() -> None:
        def again(n: int) -> int:  # a recursive closure: function -> cell -> function
            return n if n < 1 else again(n - 1)

        again(1)

    left = _cycles_left_by(cyclic)
    assert left[f"{test_the_check_can_fail.__name__}.<locals>.cyclic.<locals>.again"] == 1


def test_the_check_finds_a_cycle_left_inside_a_run_that_freezes_its_survivors() -> None:
    def cyclic_in_a_run() -> None:
        with collector_paused(freeze_above=0):

            def again(n: int) -> int:
                return n if n < 1 else again(n - 1)

            again(1)

    left = _cycles_left_by(cyclic_in_a_run)
    assert (
        left[
            f"{test_the_check_finds_a_cycle_left_inside_a_run_that_freezes_its_survivors.__name__}"
            ".<locals>.cyclic_in_a_run.<locals>.again"
        ]
        == 1
    )


def test_a_run_freezes_what_it_leaves_alive_only_when_that_is_large() -> None:
    def run(n: int) -> tuple[list, int]:
        gc.unfreeze()
        with collector_paused(freeze_above=1_000):
            kept = [{} for _ in range(n)]
        frozen = gc.get_freeze_count()
        gc.unfreeze()
        return kept, frozen

    assert run(100)[1] == 0
    assert run(5_000)[1] >= 5_000


def test_telling_two_specs_of_one_job_id_apart_leaves_no_cycles() -> None:
    # the fold explains a reused job id with other content (a recursive walk of both specs)
    old = ev.JobSpec(job_id="j", tenant="org/a", resources=ev.Resources(gpus=1, cpu_milli=1000))
    new = ev.JobSpec(job_id="j", tenant="org/a", resources=ev.Resources(gpus=2, cpu_milli=1000))
    lines: list[str] = []
    assert _cycles_left_by(lambda: lines.extend(spec_differences(old, new))) == Counter()
    assert lines[-1] == "resources.gpus: stored 1, new 2"
