"""Inference services through the simulator (issue 17): seed 003's "scale inference to 6
replicas, training is evicted" and the disruption budget of a preemptible service. Both run
in checking mode (deciders pure, events re-decided identically)."""

from pathlib import Path

from gpuledger import events as ev
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from gpuledger.services.domain.fold.ledger import replica_id

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
    assert all(
        e.checkpointed and e.lost_gpu_ms == 0 and e.preempted_by.startswith(svc + "~")
        for e in evicted
    )
    assert (
        sum(j.state == "running" for j in sim.ledger.jobs.values() if j.job_id.startswith("resnet"))
        == 2
    )

    sim = simulate(
        load(EXAMPLES / "inference-scale.yaml"), check=True, until_ms=3 * 3_600_000 + 60_000
    )
    assert replicas_running(sim.ledger, svc) == [replica_id(svc, i) for i in range(3)]
    stopped = [
        e for _, _, e in sim.log if isinstance(e, ev.GangEvicted) and e.reason == "ScaledDown"
    ]
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
    declined = [
        e for _, _, e in sim.log if isinstance(e, ev.PreemptionDeclined) and e.job_id == "urgent-2"
    ]
    assert declined and {x["reason"] for x in declined[0].details["excluded"]} == {
        "DisruptionBudget"
    }
    counts = running_replicas_over_time(sim.log, "svc")
    after_start = [n for t, n in counts if t > 0]
    assert min(after_start) == 3 and after_start[-1] == 4  # never below min_available
    assert sorted(r.state for r in sim.ledger.replicas_of("svc")) == ["running"] * 4


def test_a_time_of_day_policy_scales_a_service_and_training_gets_the_gpus_back_at_night():
    """Given the seed 003 cluster with the service scaled by schedules instead of by hand
    (6 replicas from 08:00, 3 from 20:00, simulator time 0 = 00:00 UTC), when a day passes,
    then quota publishes one `ServiceScaled` per fire time (at 0 it catches up the fires of
    the day before, so the night's 3 is in force), 6 replicas run by day (three training jobs
    evicted with their checkpoints) and 3 at night (the training resumes)."""
    import yaml

    from gpuledger.replay.scenario import from_document

    doc = yaml.safe_load((EXAMPLES / "inference-scale.yaml").read_text())
    doc["name"] = "inference-by-schedule"
    doc["timeline"] = [e for e in doc["timeline"] if "scale" not in e]
    for e in doc["timeline"]:
        if "resnet" in e["submit"]["id"]:
            e["submit"]["duration"] = "30h"
    doc["schedules"] = [
        {
            "name": "peak",
            "cron": "0 8 * * *",
            "services": [{"job": "bert-sentiment-inference", "replicas": 6}],
        },
        {
            "name": "off-peak",
            "cron": "0 20 * * *",
            "services": [{"job": "bert-sentiment-inference", "replicas": 3}],
        },
    ]
    svc, hour = "bert-sentiment-inference", 3_600_000

    day = simulate(from_document(doc), check=True, until_ms=14 * hour)
    scaled = [e for _, _, e in day.log if isinstance(e, ev.ServiceScaled)]
    assert [(e.occurred_at_ms, e.replicas, e.correlation_id, e.producer) for e in scaled] == [
        (0, 6, "schedule:peak", "quota/0"),
        (0, 3, "schedule:off-peak", "quota/0"),
        (8 * hour, 6, "schedule:peak", "quota/0"),
    ]
    assert replicas_running(day.ledger, svc) == [replica_id(svc, i) for i in range(6)]
    evicted = [e for _, _, e in day.log if isinstance(e, ev.GangEvicted)]
    assert len(evicted) == 3 and all(e.checkpointed for e in evicted)

    night = simulate(from_document(doc), check=True, until_ms=22 * hour)
    scaled = [e for _, _, e in night.log if isinstance(e, ev.ServiceScaled)]
    assert [(e.occurred_at_ms, e.replicas) for e in scaled] == [
        (0, 6),
        (0, 3),
        (8 * hour, 6),
        (20 * hour, 3),
    ]
    assert replicas_running(night.ledger, svc) == [replica_id(svc, i) for i in range(3)]
    assert (
        sum(
            j.state == "running"
            for j in night.ledger.jobs.values()
            if j.job_id.startswith("resnet")
        )
        == 5
    )
