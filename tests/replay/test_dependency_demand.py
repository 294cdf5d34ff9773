"""Jobs waiting for a dependency are not demand: given a tenant whose big job waits for
another of its jobs, when the scheduler, quota and preemption decide, then the waiting job
counts in no tenant's demand or fair share, triggers no reclaim or preemption, earns no
reservation, does not stop an elastic gang from growing, and is not pending work in the
fragmentation view; once its dependency is met it is demand like any job."""

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason, PreemptionReason
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate
from tests.replay.simlog import logged, projected

H = 3_600_000


def shares_at(sim, t_ms):
    """{tenant: (demand, fair share)} in GPUs as last published at or before `t_ms`."""
    out = {}
    for e in logged(sim, ev.FairShareUpdated):
        if e.occurred_at_ms <= t_ms:
            for s in e.shares:
                out[s.tenant] = (s.demand_gpu_milli / 1000, s.fair_share_gpu_milli / 1000)
    return out


def two_tenants(extra_timeline=(), **policy):
    """ml runs `prep` (2 GPUs, 1 h) and `train` (6 GPUs) waits for it to succeed; web asks
    for 8 GPUs of preemptible work at once. 8 GPUs, no guarantees."""
    doc = {
        "cluster": {"nodes": [{"name": "gpu-1", "gpus": 8}]},
        "tenants": [{"name": "ml", "guaranteed": 0}, {"name": "web", "guaranteed": 0}],
        "timeline": [
            {"at": 0, "submit": {"id": "prep", "tenant": "ml", "gpus": 2, "duration": "1h"}},
            {"at": 0, "submit": {"id": "train", "tenant": "ml", "gpus": 6, "duration": "1h",
                                 "depends_on": [{"job": "prep", "on": "succeeded"}]}},
            *extra_timeline,
        ],
    }  # fmt: skip
    if policy:
        doc["policy"] = policy
    return doc


def test_a_job_waiting_for_its_dependency_is_not_demand_for_fair_share():
    doc = two_tenants(
        [{"at": 60, "submit": {"id": "web-1", "tenant": "web", "gpus": 6, "duration": "2h"}}]
    )
    sim = simulate(from_document(doc), check=True)
    # while train waits for prep, ml wants the 2 GPUs prep holds, no more
    assert shares_at(sim, 30 * 60_000) == {"ml": (2.0, 2.0), "web": (6.0, 6.0)}
    reasons = [e.reason for e in logged(sim, ev.PendingReasonChanged, job_id="train")]
    assert reasons[0] == PendingReason.Dependency


def test_a_met_dependency_makes_the_job_demand_again():
    doc = two_tenants(
        [{"at": 60, "submit": {"id": "web-1", "tenant": "web", "gpus": 6, "duration": "3h"}}]
    )
    sim = simulate(from_document(doc), check=True)
    # prep succeeded at 1 h: train's 6 GPUs are ml's demand from then on
    assert shares_at(sim, H) == {"ml": (6.0, 4.0), "web": (6.0, 4.0)}


def test_a_job_waiting_for_its_dependency_triggers_no_reclaim():
    """ml is guaranteed 8: were train demand, it would reclaim web's borrowed GPUs at once."""
    doc = two_tenants(
        [{"at": 60, "submit": {"id": "web-1", "tenant": "web", "gpus": 6, "duration": "3h",
                               "checkpoint": {"interval": "10m", "save": "10s"}}}]
    )  # fmt: skip
    doc["tenants"][0]["guaranteed"] = 8
    sim = simulate(from_document(doc), check=True)
    requests = logged(sim, ev.PreemptionRequested)
    assert requests, "train reclaims once prep has succeeded"
    assert all(r.occurred_at_ms >= H for r in requests)
    assert {(r.reason, r.beneficiary) for r in requests} == {(PreemptionReason.Reclaim, "train")}
    assert logged(sim, ev.PreemptionDeclined, job_id="train") == []


def test_a_job_waiting_for_its_dependency_earns_no_reservation():
    doc = two_tenants(
        [{"at": 60, "submit": {"id": "web-1", "tenant": "web", "gpus": 6, "duration": "3h"}}],
        reservation_after_s=60,
    )
    sim = simulate(from_document(doc), until_ms=H - 1, check=True)
    for e in logged(sim, ev.PendingReasonChanged, job_id="train"):
        assert e.reason == PendingReason.Dependency
        assert "reservation" not in e.details


def test_an_elastic_gang_grows_while_a_job_waits_for_a_dependency():
    doc = {
        "cluster": {"nodes": [{"name": "gpu-1", "gpus": 8}]},
        "tenants": [{"name": "ml", "guaranteed": 8}],
        "policy": {"min_runtime_s": 60},
        "timeline": [
            {"at": 0, "submit": {"id": "hold", "tenant": "ml", "gpus": 4, "duration": "10m"}},
            {"at": 1, "submit": {"id": "elastic", "tenant": "ml", "gpus": 1, "replicas": 8,
                                 "min_members": 4, "duration": "2h"}},
            {"at": 600, "submit": {"id": "later", "tenant": "ml", "gpus": 8, "duration": "10m",
                                 "depends_on": [{"job": "elastic", "on": "succeeded"}]}},
        ],
    }  # fmt: skip
    sim = simulate(from_document(doc), until_ms=H, check=True)
    (grew,) = logged(sim, ev.GangResized, job_id="elastic")
    assert (grew.from_members, grew.to_members, grew.reason) == (4, 8, "Grow")
    # hold ended as `later` came: `later` waits for a dependency, not for capacity
    assert grew.occurred_at_ms == 10 * 60_000


def test_a_job_waiting_for_its_dependency_is_not_pending_work_in_sql(tmp_path):

    doc = two_tenants()
    sim = simulate(from_document(doc), until_ms=30 * 60_000)
    with projected(sim, tmp_path / "p.duckdb") as con:
        (row,) = con.execute(
            "SELECT free_gpus, stranded_gpus, pending_jobs FROM fragmentation WHERE node = '*'"
        ).fetchall()
        (demand,) = con.execute(
            "SELECT demand_gpu_milli FROM tenants WHERE tenant = 'ml'"
        ).fetchone()
    # train (6 GPUs) waits for prep: no pending work, so nothing is stranded by it
    assert row == (6, 6, 0)
    assert demand == 2000


def test_its_queue_time_counts_from_when_its_dependencies_were_met():
    """Aging and reservations count the wait for capacity, not the wait for a dependency."""
    from gpuledger.services.domain.policy.queue import aging_steps

    doc = two_tenants(
        [{"at": 60, "submit": {"id": "web-1", "tenant": "web", "gpus": 6, "duration": "3h"}}],
        reservation_after_s=600,
        aging_after_wait_s=1200,
    )
    sim = simulate(from_document(doc), until_ms=H + 5 * 60_000, check=True)
    train = sim.ledger.jobs["train"]
    assert str(train.state) == "pending"
    # 65 min since submission, 5 min since prep succeeded: no aging step yet (one per 20 min)
    assert aging_steps(sim.ledger, train, H + 5 * 60_000) == 0
    sim = simulate(from_document(doc), until_ms=2 * H, check=True)
    reserved = [
        e.occurred_at_ms
        for e in logged(sim, ev.PendingReasonChanged, job_id="train")
        if "reservation" in e.details
    ]
    # starving 10 min after its dependency was met at 1 h, not 10 min after submission
    assert reserved and reserved[0] == H + 10 * 60_000
