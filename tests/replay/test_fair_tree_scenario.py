"""Fair share down to users, end to end on the virtual clock (examples/fair-tree.yaml,
docs/users.md): given research's users alice (weight 2), bob and carol (weight 1), a
half-life of 1 h, and a first hour in which alice ran 6 GPUs and bob 2, when alice submits
a sweep of 50 one-GPU tasks and bob, after her, one 4-GPU job, and carol, who has used
nothing, one 1-GPU job ten minutes later, then bob's job runs first (alice's usage over her
weight is the heavier), and carol's runs on the first GPU the sweep frees, not after it."""

from pathlib import Path

import yaml

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document, load
from gpuledger.replay.simulator import simulate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fair-tree.yaml"
MIN = 60_000


def placed_min(sim) -> dict[str, int]:
    return {
        e.job_id: e.occurred_at_ms // MIN for _, _, e in sim.log if isinstance(e, ev.GangPlaced)
    }


def test_the_lighter_past_user_goes_first_and_a_colleague_does_not_wait_for_the_sweep():
    sim = simulate(load(EXAMPLE))
    placed = placed_min(sim)
    sweep = sorted(t for j, t in placed.items() if j.startswith("sweep@"))
    # then bob's job, submitted after alice's sweep, runs at 1 h with the sweep's first 4
    assert placed["b-train"] == 60 and sweep[:4] == [60] * 4
    # and carol's job takes the first GPU the sweep frees (at 80 m), ahead of 46 of its tasks
    assert placed["c-eval"] == 80
    assert sum(1 for t in sweep if t >= placed["c-eval"]) == 46
    # and the sweep, all 50 tasks, still ran
    assert len(sweep) == 50 and all(j.state == "completed" for j in sim.ledger.jobs.values())
    # and the numbers behind it: at 1 h alice's usage over weight 2 is above bob's over 1
    at = 60 * MIN
    early = simulate(load(EXAMPLE), until_ms=at - 1).ledger
    alice, bob = (early.user_usage_at("research", u, at) for u in ("alice", "bob"))
    assert alice == 3 * bob and alice // 2 > bob


def test_without_users_the_colleagues_job_waits_behind_the_whole_sweep():
    # given the same work all under one user (how every log before users folds)
    doc = yaml.safe_load(EXAMPLE.read_text())
    for step in doc["timeline"]:
        step["submit"]["user"] = "alice"
    placed = placed_min(simulate(from_document(doc)))
    # then submit time decides inside the tenant: carol's job runs after every sweep task
    assert placed["c-eval"] >= max(t for j, t in placed.items() if j.startswith("sweep@"))
    assert placed["b-train"] == 60  # 4 GPUs free at 1 h either way


def test_a_what_if_reports_the_waits_of_each_user():
    # given the example, and the same work with users' past usage not counted (no half-life)
    from gpuledger.replay.compare import compare, rows, summarize

    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["policy"]["usage_half_life_s"] = 0
    a = summarize(simulate(load(EXAMPLE)).log, "example")
    b = summarize(simulate(from_document(doc)).log, "no-decay")
    # then each run's waits are split by the jobs' users
    waits = a.metrics["wait_s_p50_by_user"]
    assert set(waits) == {"alice", "bob", "carol"}
    assert (waits["bob"], waits["carol"]) == (0.0, 600.0)  # b-train at once, c-eval at 80 min
    # and the comparison table has a row per user and percentile
    labels = [r[0] for r in rows(compare(a, b))]
    assert {f"wait {q} user {u}" for q in ("p50", "p99") for u in waits} <= set(labels)
