"""Inference services through the simulator (issue 17): seed 003's "scale inference to 6
replicas, training is evicted" and the disruption budget of a preemptible service. Both run
in checking mode (deciders pure, events re-decided identically)."""

from pathlib import Path

from gpuledger import events as ev
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.ledger import replica_id

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def replicas_running(ledger, service):
    return sorted(r.job_id for r in ledger.replicas_of(service) if r.state == "running")


def running_replicas_over_time(log, service):
    """(time, replicas running) after each event about one of the service's replicas."""
    up: set[str] = set()
    out = []
    for _, _, e in log:
        job = getattr(e, "job_id", "")
        if not job.startswith(service + "~"):
            continue
        if isinstance(e, ev.GangPlaced):
            up.add(job)
        elif isinstance(e, ev.GangEvicted):
            up.discard(job)
        out.append((e.occurred_at_ms, len(up)))
    return out


def test_seed_003_scaling_inference_to_6_replicas_evicts_training_with_checkpoints():
    """Given 8 GPUs: 3 inference replicas (non-preemptible) and 5 training jobs;
    when the service is scaled to 6 at 1 h, then 3 training jobs checkpoint and are evicted
    and 6 replicas run; when it is scaled back to 3 at 3 h, the highest replicas stop and the
    training resumes from its checkpoints."""
    sim = simulate(load(EXAMPLES / "inference-scale.yaml"), check=True, until_ms=2 * 3_600_000)
    svc = "bert-sentiment-inference"
    assert replicas_running(sim.ledger, svc) == [replica_id(svc, i) for i in range(6)]
    evicted = [e for _, _, e in sim.log if isinstance(e, ev.GangEvicted)]
    assert sorted(e.job_id for e in evicted) == ["resnet-1", "resnet-2", "resnet-3"]
    assert all(e.checkpointed and e.lost_gpu_ms == 0 and e.preempted_by.startswith(svc + "~")
               for e in evicted)
    assert sum(j.state == "running" for j in sim.ledger.jobs.values() if j.job_id.startswith("resnet")) == 2

    sim = simulate(load(EXAMPLES / "inference-scale.yaml"), check=True, until_ms=3 * 3_600_000 + 60_000)
    assert replicas_running(sim.ledger, svc) == [replica_id(svc, i) for i in range(3)]
    stopped = [e for _, _, e in sim.log if isinstance(e, ev.GangEvicted) and e.reason == "ScaledDown"]
    assert sorted(e.job_id for e in stopped) == [replica_id(svc, i) for i in (3, 4, 5)]
    resumed = [e for _, _, e in sim.log if isinstance(e, ev.GangPlaced) and e.resume_step]
    assert sorted(e.job_id for e in resumed) == ["resnet-1", "resnet-2", "resnet-3"]


def test_a_service_with_min_available_3_of_4_loses_one_replica_not_all_to_an_urgent_job():
    """The reported bug: given a preemptible 4-replica service (min_available 3) on 8 GPUs,
    when an urgent 2-GPU job and then another arrive, then exactly one replica is evicted,
    the second job waits (`DisruptionBudget`) and 3 replicas run at every moment."""
    sim = simulate(load(EXAMPLES / "service-budget.yaml"), check=True)
    evicted = [e for _, _, e in sim.log if isinstance(e, ev.GangEvicted)]
    assert [e.job_id for e in evicted] == ["svc~0"]
    declined = [e for _, _, e in sim.log if isinstance(e, ev.PreemptionDeclined) and e.job_id == "urgent-2"]
    assert declined and {x["reason"] for x in declined[0].details["excluded"]} == {"DisruptionBudget"}
    counts = running_replicas_over_time(sim.log, "svc")
    after_start = [n for t, n in counts if t > 0]
    assert min(after_start) == 3 and after_start[-1] == 4  # never below min_available
    assert sorted(r.state for r in sim.ledger.replicas_of("svc")) == ["running"] * 4
