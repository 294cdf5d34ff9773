"""`gpuledger why` for issue 16's defragmentation, from the projection of the simulated
scenarios: the blocked job says it waits for a consolidation (and which one), the moved job
says it was migrated and for which job; a MIG job names the re-geometry made for it."""

from __future__ import annotations

from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from tests.projections.audit_cli import EXAMPLES, projected_log


def projected(tmp_path, name, until_ms=None):
    return projected_log(tmp_path, simulate(load(EXAMPLES / name), until_ms=until_ms).log)


def test_why_the_blocked_job_waits_for_a_consolidation_and_the_mover_was_migrated(tmp_path):
    run = projected(tmp_path, "consolidation.yaml", until_ms=910_000)  # p2 is checkpointing
    r = run("why", "wide")
    assert r.exit_code == 0, r.output
    assert "Reason:    WaitingForConsolidation" in r.output
    assert "Message:   waiting for a consolidation: p2 migrating off n1 to n2" in r.output
    assert "Defrag:    Consolidate: wide needs 4 GPUs and 4 are free, but fragmented" in r.output
    r = run("why", "p2")
    assert "Migrated #1: for wide" in r.output and "reason Consolidate" in r.output
    assert "migrating p2 (2 GPUs) off n1 for wide" in r.output


def test_why_after_the_move_both_jobs_run_and_say_what_happened(tmp_path):
    run = projected(tmp_path, "consolidation.yaml", until_ms=1_000_000)
    r = run("why", "wide")
    assert (
        "State:     running" in r.output
        and "Migrated p2 (Consolidate, lost 0 GPU-seconds)" in r.output
    )
    r = run("why", "p2")
    assert (
        "State:     running" in r.output
        and "outcome" in r.output
        and "checkpointed: yes" in r.output
    )


def test_why_a_mig_job_names_the_regeometry_made_for_it(tmp_path):
    run = projected(tmp_path, "mig-regeometry.yaml", until_ms=3_000_000)
    r = run("why", "big-a")
    assert "Defrag:    MIG re-geometry: big-a asks for 3g.40gb" in r.output
    assert "GPU 1 of m1 is idle" in r.output
    r = run("why", "big-b")  # waits: GPU 0 is busy until 3600 s
    assert "Reason:    MIGPlacementUnavailable" in r.output


def test_why_a_mig_job_names_the_rate_limit_it_waits_for(tmp_path):
    run = projected(tmp_path, "mig-regeometry.yaml", until_ms=3_630_000)
    r = run("why", "big-b")
    assert "Reason:    MIGPlacementUnavailable" in r.output
    assert "limited to 1 per 3600s: next at" in r.output
