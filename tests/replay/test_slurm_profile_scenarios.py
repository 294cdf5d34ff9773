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


def ended(sim, job_id) -> tuple[int, str]:
    """When the job's run ended (s) and why."""
    (e,) = [e for _, _, e in sim.log if isinstance(e, ev.GangFailed) and e.job_id == job_id]
    return e.occurred_at_ms // 1000, e.reason


def test_a_run_over_its_limit_is_stopped_at_the_next_periodic_check():
    # Slurm's controller checks time limits every 30 s (PERIODIC_TIMEOUT): a run that
    # reaches its 70 s limit at 75 s is stopped by the check at 90 s, not at 75 s
    sim = site(job(5, "slow", "a", "10m", time_limit="70s"), default_grace_s=0)
    assert ended(sim, "slow") == (90, "TimeLimit")
    (reached,) = [e for _, _, e in sim.log if isinstance(e, ev.TimeLimitReached)]
    assert (reached.occurred_at_ms, reached.deadline_ms) == (90_000, 90_000)


def test_with_over_time_limit_the_run_is_stopped_at_the_first_check_after_it():
    # OverTimeLimit (the run's grace) 20 s: over at 95 s, so the check at 120 s stops it
    sim = site(
        job(5, "slow", "a", "10m", time_limit="70s", checkpoint={"grace": "20s"}),
        default_grace_s=0,
    )
    (reached,) = [e for _, _, e in sim.log if isinstance(e, ev.TimeLimitReached)]
    assert (reached.occurred_at_ms, reached.deadline_ms) == (90_000, 120_000)


def test_a_zero_check_period_stops_the_run_at_its_limit():
    sim = site(
        job(5, "slow", "a", "10m", time_limit="70s"),
        slurm={"time_limit_check_s": 0},
        default_grace_s=0,
    )
    assert ended(sim, "slow") == (75, "TimeLimit")
