"""The `slurm` profile through the simulator (issue 41, the baseline's fidelity to a real
Slurm): given a small site under `policy.profile: slurm`, when the scenario runs, then jobs
are ordered and stopped as Slurm orders and stops them."""

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate


def site(*timeline, slurm=None, gpus=2, **policy):
    doc = {
        "cluster": {"nodes": [{"name": "n1", "gpus": gpus, "model": "H100-80GB"}]},
        "tenants": [{"name": "a", "weight": 1}, {"name": "b", "weight": 1}],
        "policy": {
            "profile": "slurm",
            "min_runtime_s": 0,
            "eviction_budget_per_hour": 0,
            "aging_after_preemptions": 0,
            "aging_after_wait_s": 0,
            "usage_half_life_s": 600,
            "slurm": {
                "multifactor": True,
                "weights": {"fairshare": 1000},
                "calc_period_s": 60,
                **(slurm or {}),
            },  # fmt: skip
            **policy,
        },
        "timeline": list(timeline),
    }
    return simulate(from_document(doc), check=True)


def job(at, id, tenant, duration, gpus=2, **extra):
    spec = {"id": id, "tenant": tenant, "gpus": gpus, "duration": duration, **extra}
    return {"at": at, "submit": spec}


def starts(sim) -> dict[str, int]:
    """Each job's first placement time, in seconds."""
    out: dict[str, int] = {}
    for _, _, e in sim.log:
        if isinstance(e, ev.GangPlaced):
            out.setdefault(e.job_id, e.occurred_at_ms // 1000)
    return out


def test_fair_share_reads_the_usage_of_the_last_priority_recomputation():
    # PriorityCalcPeriod 60 s: a's run in the first minute does not lower a's priority
    # until the next recomputation, so within that minute equal shares go by submit order
    sim = site(
        job(0, "a-run", "a", "20s"),
        job(1, "a-next", "a", "10s"),
        job(2, "b-next", "b", "10s"),
        job(40, "a-run2", "a", "30s"),
        job(61, "a-late", "a", "10s"),
        job(62, "b-late", "b", "10s"),
    )
    s = starts(sim)
    # first minute: nobody had used anything at 0 s, so a-next (submitted first) goes first
    assert (s["a-next"], s["b-next"]) == (20, 30)
    # second minute: at 60 s a had used 2 GPUs for 30 s + 20 s, b for 10 s: b goes first
    assert (s["b-late"], s["a-late"]) == (70, 80)
