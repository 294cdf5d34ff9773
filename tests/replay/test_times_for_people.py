"""Times print as durations or ISO dates, never epoch floats: the demo's timeline on a virtual
clock (`t+9s`) and on a wall clock (an ISO date), and the formatter's units."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from gpuledger.events.sentences import timeline_line
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import Simulator, standard_services
from gpuledger.services.domain.tooling.timefmt import duration, instant

ROOT = Path(__file__).resolve().parents[2]
WALL = 1_795_450_000_000  # 2026-11-23T16:06:40Z, the kind of number the live demo printed
EPOCHISH = re.compile(r"\d\.\d+e\+\d+|\b\d{9,}(\.\d+)?s?\b")


def _timeline(origin_ms: int) -> list[str]:
    """The demo run with its clock starting at `origin_ms`, as the timeline prints it."""
    sc = load(ROOT / "examples/demo.yaml")
    sim = Simulator(standard_services(sc.nodes))
    sim.now_ms = origin_ms
    lines: list[str] = []
    sim.on_event = lambda _s, _subj, e: lines.append(timeline_line(e, origin_ms) or "")
    for e in sc.config:
        sim.publish(msgspec.structs.replace(e, occurred_at_ms=e.occurred_at_ms + origin_ms))
    sim.schedule(
        (at + origin_ms, msgspec.structs.replace(e, occurred_at_ms=e.occurred_at_ms + origin_ms))
        for at, e in sc.inputs
    )
    sim.run()
    return [line for line in lines if line]


def test_the_simulated_demo_prints_deadlines_as_times_since_the_start():
    lines = _timeline(0)
    assert any("deadline t+9s" in line for line in lines)
    assert [line for line in lines if EPOCHISH.search(line)] == []


def test_the_demo_on_a_wall_clock_prints_iso_dates_not_epoch_seconds():
    # given the demo run at a real date; then no line holds an epoch number
    lines = _timeline(WALL)
    assert [line for line in lines if EPOCHISH.search(line)] == []
    assert any("deadline 2026-11-23T16:06:49Z" in line for line in lines)
    # and the timeline's own column is the time since the start
    assert lines[0].lstrip().startswith("0.0s")


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (500, "0.5s"),
        (9_000, "9s"),
        (59_999, "1m"),
        (3_500_000, "58m20s"),
        (3_600_000, "1h"),
        (90_061_000, "1d1h1m1s"),
        (-5_000, "-5s"),
    ],
)
def test_durations_read_in_units(ms, text):
    assert duration(ms) == text


def test_instants_are_virtual_offsets_or_iso_dates():
    assert instant(9_000) == "t+9s"
    assert instant(WALL) == "2026-11-23T16:06:40Z"


def test_iso_dates_match_the_standard_calendar():
    from datetime import UTC, datetime

    for ms in (
        946_684_800_000,
        951_782_400_000,
        1_795_450_000_000,
        4_102_444_800_000,
        *range(946_684_800_000, 4_102_444_800_000, 86_399_999_937),
    ):
        assert instant(ms) == datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_run_summaries_name_job_states_by_their_plain_names(tmp_path):
    """`simulate` and `replay` end with `jobs {...}`: states as users write them, never enum
    reprs (`<JobState.completed: 'completed'>`)."""
    from tests.integration.cluster import EXAMPLES, cli

    log = tmp_path / "three.jsonl"
    simulated = cli("simulate", str(EXAMPLES / "three-jobs.yaml"), "--log", str(log))
    replayed = cli("replay", str(log), "--out", str(tmp_path / "again.jsonl"))
    for run in (simulated, replayed):
        assert run.returncode == 0, run.stderr
        assert "jobs {'completed': 3, 'rejected': 1}" in run.stdout and "JobState" not in run.stdout
