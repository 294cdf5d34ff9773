"""The lending-limits example through the simulator in checking mode (every decide re-run
without caches and re-decided from the log): given prod (guaranteed 8, lending_limit 2),
research (guaranteed 4, borrowing_limit 4) and scratch (no guarantee) on 16 GPUs, then
research never holds more than 8, scratch borrows only the 2 GPUs prod lends while prod is
idle, and prod gets its 8 back by reclaiming only what was lent."""

from pathlib import Path

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason, PreemptionReason
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def held_over_time(log):
    """(time, {tenant: milli-GPUs held}) after every placement or release."""
    held: dict[str, int] = {}
    alloc: dict[str, tuple[str, int]] = {}
    out = []
    for _, _, e in log:
        if isinstance(e, ev.GangPlaced):
            milli = sum(len(m.gpus) * 1000 for m in e.members)
            alloc[e.allocation_id] = (e.tenant, milli)
            held[e.tenant] = held.get(e.tenant, 0) + milli
        elif isinstance(e, (ev.GangEvicted, ev.GangCompleted, ev.GangFailed)):
            tenant, milli = alloc.pop(e.allocation_id)
            held[tenant] -= milli
        else:
            continue
        out.append((e.occurred_at_ms, dict(held)))
    return out


def reasons(log, job_id):
    return [
        (e.occurred_at_ms // 1000, e.reason)
        for _, _, e in log
        if isinstance(e, ev.PendingReasonChanged) and e.job_id == job_id
    ]


def test_lending_limits_hold_at_every_moment_and_prod_reclaims_only_what_it_lent():
    sim = simulate(load(EXAMPLES / "lending-limits.yaml"), check=True)
    log = sim.log
    assert {j.job_id: j.state for j in sim.ledger.jobs.values()} == dict.fromkeys(
        ["prod-serve", "research-extra", "research-train", "scratch-big", "scratch-small"],
        "completed",
    )
    for _, held in held_over_time(log):
        # research: guarantee 4 + borrowing_limit 4
        assert held.get("research", 0) <= 8000
        # what others hold never eats into the 6 unused GPUs prod does not lend
        unlent = max(0, 8000 - held.get("prod", 0) - 2000)
        assert sum(held.values()) + unlent <= 16_000
    # research's extra job waits on its borrowing limit until its training ends at 4 h
    assert reasons(log, "research-extra")[0] == (60, PendingReason.ExceedsLimit)
    (extra,) = [
        e for _, _, e in log if isinstance(e, ev.GangPlaced) and e.job_id == "research-extra"
    ]
    assert extra.occurred_at_ms == 4 * 3_600_000
    # scratch borrows the 2 lent GPUs; its 4-GPU job waits on the lending limit with 6 free
    small = [e for _, _, e in log if isinstance(e, ev.GangPlaced) and e.job_id == "scratch-small"]
    assert (small[0].occurred_at_ms, small[0].borrowing) == (120_000, True)
    assert reasons(log, "scratch-big")[0] == (180, PendingReason.LendingLimit)
    # prod's service takes its guarantee: 6 kept free plus the 2 lent, reclaimed
    (req,) = [e for _, _, e in log if isinstance(e, ev.PreemptionRequested)]
    assert (req.job_id, req.beneficiary, req.reason) == (
        "scratch-small",
        "prod-serve",
        PreemptionReason.Reclaim,
    )
    (serve,) = [e for _, _, e in log if isinstance(e, ev.GangPlaced) and e.job_id == "prod-serve"]
    assert (serve.occurred_at_ms, serve.borrowing) == (3_660_000, False)
