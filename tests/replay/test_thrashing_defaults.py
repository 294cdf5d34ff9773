"""Issue 11, case 8: safe anti-thrashing defaults. Given the mixed load of
replay/scenarios/thrashing-mixed.yaml (no `policy:` block, so the defaults decide), when it
runs on the virtual clock next to the same load under the old all-zero policy, then
evictions are bounded per job and in total, and the starved job finishes. And a job that
aging promoted keeps its promotion once it runs."""

from collections import Counter, defaultdict
from pathlib import Path

import yaml

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document, load
from gpuledger.replay.simulator import simulate
from gpuledger.replay.verify import verify
from gpuledger.services.domain.fold.ledger import Ledger
from gpuledger.services.preemption.victims import plan, releasing_by_tenant
from tests.replay.simlog import logged

SCENARIO = Path(__file__).resolve().parents[2] / "replay" / "scenarios" / "thrashing-mixed.yaml"
HOUR_MS = 3_600_000
OLD_ZERO = {
    "min_runtime_s": 0,
    "eviction_budget_per_hour": 0,
    "aging_after_preemptions": 0,
    "aging_after_wait_s": 0,
}


def evictions(sim) -> Counter:
    """Evictions per job (every reason but completion/cancel)."""
    return Counter(e.job_id for e in logged(sim, ev.GangEvicted) if e.reason != "Cancelled")


def test_the_thrashing_mixed_load_settles_under_the_default_policy():
    # given: the load run with the defaults, and with the old all-zero values set explicitly
    new = simulate(load(SCENARIO))
    doc = yaml.safe_load(SCENARIO.read_text())
    old = simulate(from_document({**doc, "policy": OLD_ZERO}))
    policy = new.ledger.config.policy
    assert policy == ev.Policy(), "the scenario has no policy block: defaults decide"
    assert policy.min_runtime_s > 0 and policy.eviction_budget_per_hour > 0
    assert policy.aging_after_preemptions > 0 and policy.aging_after_wait_s > 0

    # then: the old policy thrashes (the bug reproduced) ...
    old_per_job, new_per_job = evictions(old), evictions(new)
    assert sum(old_per_job.values()) >= 150 and old_per_job.most_common(1)[0][1] >= 100
    # ... the defaults cut total evictions at least five-fold, and no job is evicted more than
    # its budget in any hour
    assert sum(old_per_job.values()) >= 5 * sum(new_per_job.values())
    assert max(new_per_job.values()) <= policy.eviction_budget_per_hour
    requested: dict[str, list[int]] = defaultdict(list)
    for r in logged(new, ev.PreemptionRequested):
        requested[r.job_id].append(r.occurred_at_ms)
    for times in requested.values():
        for t in times:
            assert sum(1 for u in times if t - HOUR_MS < u <= t) <= policy.eviction_budget_per_hour
    # every victim had run its minimum runtime in that allocation
    for r in logged(new, ev.PreemptionRequested):
        rec = new.ledger.allocations[r.allocation_id]
        assert r.occurred_at_ms - min(rec.started.values()) >= policy.min_runtime_s * 1000, r
    # refusals name the protection and when it lapses
    declined = Counter(d.reason for d in logged(new, ev.PreemptionDeclined))
    assert declined["MinRuntime"] > 0

    # and the starved job finishes, earlier than under the old policy; so does everything else
    starved_new, starved_old = new.ledger.jobs["starved"], old.ledger.jobs["starved"]
    assert starved_new.state == starved_old.state == "completed"
    assert starved_new.finished_ms < starved_old.finished_ms
    assert all(j.state == "completed" for j in new.ledger.jobs.values())
    # every decision re-decides identically from the log
    report = verify(new.log)
    assert report.ok and report.checked > 1000


def _aging_scenario(extra_timeline=()):
    """One 8-GPU node, one tenant. `blocker` (interactive, 75) runs 0-15 min; `patient`
    (train, 50) waits from t=1 s and ages one class step (to 75) after 10 min; `next-1`
    (interactive, 75) arrives at 12 min and queues behind it. Only aging is on."""
    return from_document(
        {
            "cluster": {"nodes": [{"name": "gpu-1", "gpus": 8}]},
            "tenants": [{"name": "lab", "guaranteed": 8}],
            "policy": {**OLD_ZERO, "aging_after_wait_s": 600, "default_grace_s": 30},
            "timeline": [
                {
                    "at": 0,
                    "submit": {
                        "id": "blocker",
                        "tenant": "lab",
                        "class": "interactive",
                        "gpus": 8,
                        "duration": "15m",
                    },
                },
                {
                    "at": 1,
                    "submit": {
                        "id": "patient",
                        "tenant": "lab",
                        "class": "train",
                        "gpus": 8,
                        "duration": "20m",
                        "checkpoint": {"interval": "5m", "save": "10s"},
                    },
                },
                {
                    "at": "12m",
                    "submit": {
                        "id": "next-1",
                        "tenant": "lab",
                        "class": "interactive",
                        "gpus": 8,
                        "duration": "5m",
                    },
                },
                *extra_timeline,
            ],
        }
    )


def test_a_job_aging_placed_ahead_of_a_class_is_not_evicted_by_its_next_arrival():
    # given: patient waited 15 min (aged from 50 to 75) and next-1 (75) queues behind it
    # when: blocker ends at 15 min
    sim = simulate(_aging_scenario())
    jobs = sim.ledger.jobs
    # then: patient is placed first, and next-1 may not evict it: aging kept, the refusal says so
    assert jobs["patient"].placements[0][0] == 900_000
    assert jobs["patient"].preemptions == [] and len(jobs["patient"].placements) == 1
    assert not logged(sim, ev.PreemptionRequested, beneficiary="next-1")
    # the victim search at that instant says why: patient is excluded as aged
    at_start = simulate(_aging_scenario(), until_ms=900_000)
    assert at_start.ledger.jobs["patient"].state == "running"
    search = plan(at_start.ledger, at_start.ledger.jobs["next-1"], 900_000, set())
    assert search.victims == [] and search.declined[0] == "NoVictims"
    assert [(x["job"], x["reason"]) for x in search.excluded] == [("patient", "Aged")]
    assert "aged from priority 50 to 75" in search.excluded[0]["message"]
    # patient runs its 20 min through, then next-1 runs
    assert jobs["patient"].finished_ms == 900_000 + 1_200_000
    assert jobs["next-1"].placements[0][0] == 2_100_000
    assert verify(sim.log).ok


def test_aging_never_lifts_a_job_past_a_higher_class_arriving_later():
    # given: the same, plus a CI build (100, not preemptible) arriving at 20 min
    # when: it needs the node
    sim = simulate(
        _aging_scenario(
            [
                {
                    "at": "20m",
                    "submit": {
                        "id": "ci-build",
                        "tenant": "lab",
                        "class": "build",
                        "gpus": 8,
                        "duration": "5m",
                    },
                }
            ]
        )
    )
    jobs = sim.ledger.jobs
    # then: the build evicts the aged job (promotion stays below non-preemptible classes),
    # which checkpoints and later resumes; next-1 still never evicts it
    (pre,) = jobs["patient"].preemptions
    assert (pre.at_ms, pre.by, pre.reason, pre.checkpointed) == (
        1_200_000,
        "ci-build",
        "Priority",
        True,
    )
    assert not logged(sim, ev.PreemptionRequested, beneficiary="next-1")
    assert jobs["patient"].state == "completed"
    assert verify(sim.log).ok


class _Runaway(Exception):
    pass


def test_reclaim_never_takes_a_tenant_to_its_guarantee_and_aging_alone_converges():
    """Given two tenants that both want more than their 8 guaranteed GPUs (research: four
    4-GPU gangs; product: a 4-GPU `starved` job and a 4-GPU interactive job every 2 min) and
    aging as the only safeguard (no minimum runtime, no budget), when it runs, then every
    reclaim finds its victim's tenant still above its guarantee net of the capacity already
    being released from it: several beneficiaries never strip one tenant in one instant, so
    the tenants cannot take turns reclaiming from each other (the run converges)."""
    timeline = [
        {
            "at": 0,
            "submit": {
                "id": f"bulk-{i}",
                "tenant": "research",
                "class": "train",
                "gpus": 4,
                "duration": "2h",
                "checkpoint": {"interval": "10m", "save": "30s"},
            },
        }
        for i in range(4)
    ]
    timeline.append(
        {
            "at": 60,
            "submit": {
                "id": "starved",
                "tenant": "product",
                "class": "train",
                "gpus": 4,
                "duration": "30m",
                "checkpoint": {"interval": "5m", "save": "30s"},
            },
        }
    )
    timeline += [
        {
            "at": 120 + k * 120,
            "submit": {
                "id": f"nb-{k:02d}",
                "tenant": "product",
                "class": "interactive",
                "gpus": 4,
                "duration": "5m",
                "checkpoint": {"save": "10s"},
            },
        }
        for k in range(60)
    ]
    scenario = from_document(
        {
            "cluster": {"nodes": [{"name_prefix": "node-", "count": 2, "gpus": 8}]},
            "tenants": [
                {"name": "research", "guaranteed": 8},
                {"name": "product", "guaranteed": 8},
            ],
            "policy": {**OLD_ZERO, "aging_after_wait_s": 1800, "default_grace_s": 30},
            "timeline": timeline,
        }
    )

    def runaway(seq, _subject, _event):
        if seq > 20_000:
            raise _Runaway(f"no convergence: {seq} events")

    sim = simulate(scenario, on_event=runaway)  # converges in well under 1,000 events

    folded, stripped = Ledger(), []
    for seq, _, e in sim.log:
        if isinstance(e, ev.PreemptionRequested) and e.reason == "Reclaim":
            tenant = folded.allocations[e.allocation_id].tenant
            net = folded.tenant_gpu_milli[tenant] - releasing_by_tenant(folded).get(tenant, 0)
            if net <= folded.config.tenants[tenant].guaranteed_gpu_milli:
                stripped.append((e.occurred_at_ms, e.job_id, tenant, net))
        folded.apply(seq, e)
    assert stripped == []
    assert all(j.state == "completed" for j in sim.ledger.jobs.values())
    assert verify(sim.log).ok
