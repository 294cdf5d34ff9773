"""An elastic gang shrunk instead of evicted, as the projection and `why` tell it: given the
elastic-shrink example simulated and projected, then the gang stayed `running` (never
`preempting`), its preemption row's outcome is `shrunk`, and `why` says "shrunk from 6 to 4
members" with the lost work."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from gpuledger.services.cli.audit import register
from tests.replay.simlog import projected

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_why_explains_a_shrink_and_the_gang_never_left_running(tmp_path):
    import typer

    sim = simulate(load(EXAMPLES / "elastic-shrink.yaml"), check=True, until_ms=3_600_000)
    with projected(sim, tmp_path / "data" / "projection.duckdb") as con:
        states = [
            r[0]
            for r in con.execute(
                "SELECT to_state FROM job_transitions WHERE job_id = 'pretrain' ORDER BY seq"
            ).fetchall()
        ]
        outcome, reason, lost = con.execute(
            "SELECT outcome, eviction_reason, lost_gpu_ms FROM preemptions"
            " WHERE victim_job_id = 'pretrain'"
        ).fetchone()
        held = con.execute(
            "SELECT count(*) FROM allocations WHERE job_id = 'pretrain' AND ended_at_ms IS NULL"
        ).fetchone()[0]
    assert "preempting" not in states and states[-1] == "running"
    assert (outcome, reason, lost) == ("shrunk", "Priority", 0)
    assert held == 4  # four members hold a GPU each after the shrink
    app = typer.Typer()
    register(app)
    r = CliRunner().invoke(app, ["why", "pretrain", "--data", str(tmp_path / "data")])
    assert r.exit_code == 0, r.output
    assert "Preempted #1: shrunk from 6 to 4 members by notebook" in r.output
    assert "lost work:    0 GPU-seconds" in r.output
    # and `jobs` shows the gang running with 4 of its 6 members
    r = CliRunner().invoke(app, ["jobs", "--data", str(tmp_path / "data")])
    line = next(x for x in r.output.splitlines() if x.startswith("pretrain"))
    assert line.split()[3:5] == ["running", "4x1/6"]


def test_a_rank_given_up_and_grown_back_keeps_both_intervals(tmp_path):
    sim = simulate(load(EXAMPLES / "elastic-shrink.yaml"), check=True)
    with projected(sim, tmp_path / "p.duckdb") as con:
        rows = con.execute(
            "SELECT placed_at_ms, started_at_ms, ended_at_ms, end_reason FROM allocations"
            " WHERE job_id = 'pretrain' AND rank = 4 ORDER BY placed_seq"
        ).fetchall()
        gpu_ms = con.execute(
            "SELECT sum(allocated_gpu_ms) FROM allocation_usage WHERE job_id = 'pretrain'"
        ).fetchone()[0]
    assert rows == [
        (0, 0, 1_820_000, "preempted"),
        (3_620_000, 3_620_000, 7_200_000, "completed"),
    ]
    # 4 GPUs for 2 h, plus ranks 4 and 5 for 1820 s and again for 3580 s
    assert gpu_ms == (4 * 7200 + 2 * 1820 + 2 * 3580) * 1000
