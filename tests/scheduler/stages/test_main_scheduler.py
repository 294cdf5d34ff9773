"""Stage `main_scheduler`: given the `slurm` profile with a backfill interval (the site's
`bf_interval`), when a job ahead in a partition waits for capacity, then between backfill
cycles no later job of that partition (nor on its nodes) is placed: it waits for `Priority`
until the next backfill instant, where it is placed as the native scheduler would place it
at once; a partition with nodes of its own is not held up; with no interval (the default),
nothing changes."""

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.replay.scenario import from_document
from gpuledger.replay.simulator import simulate


def site(*timeline, interval: int, nodes=None):
    doc = {
        "cluster": {"nodes": nodes or [{"name": "n1", "gpus": 2, "model": "H100-80GB"}]},
        "tenants": [{"name": "a", "weight": 1}],
        "policy": {
            "profile": "slurm",
            "min_runtime_s": 0,
            "default_grace_s": 0,
            "slurm": {"backfill_interval_s": interval, "default_partition": "p1"},
        },
        "timeline": list(timeline),
    }
    return simulate(from_document(doc), check=True)


def job(at, id, gpus, duration, **extra):
    return {"at": at, "submit": {"id": id, "tenant": "a", "gpus": gpus, "duration": duration, **extra}}  # fmt: skip


def starts(sim) -> dict[str, int]:
    return {
        e.job_id: e.occurred_at_ms // 1000
        for _, _, e in reversed(sim.log)
        if isinstance(e, ev.GangPlaced)
    }


def reasons(sim, job_id) -> list[tuple[int, str, str]]:
    return [
        (e.occurred_at_ms // 1000, e.reason, e.message)
        for _, _, e in sim.log
        if isinstance(e, ev.PendingReasonChanged) and e.job_id == job_id
    ]


QUEUE = (
    job(0, "long", 1, "20s"),
    job(0, "short", 1, "5s"),
    job(1, "big", 2, "5s"),  # ahead in the queue, waits for both GPUs (until 20 s)
    job(2, "small", 1, "3s"),
)


def test_behind_a_waiting_job_a_job_that_fits_waits_for_the_next_backfill_cycle():
    # given a 2-GPU node, `big` waiting for both GPUs, and a backfill interval of 4 s
    sim = site(*QUEUE, interval=4)
    # when `short` ends at 5 s (a main pass: 5 s is no multiple of 4 s)
    s = starts(sim)
    # then `small`, behind `big` in its partition, is placed at the backfill cycle of 8 s
    assert s["small"] == 8
    assert (s["long"], s["short"], s["big"]) == (0, 0, 20)
    # and said why in between, as Slurm's squeue would (`Priority`)
    when, reason, message = reasons(sim, "small")[-1]
    assert (when, reason) == (5, PendingReason.Priority)
    assert message == (
        "a job ahead of it in partition p1 waits for capacity: Slurm's main scheduler starts "
        "no later job there; its backfill tries every 4s"
    )


def test_with_no_interval_every_pass_backfills_as_the_native_scheduler_does():
    s = starts(site(*QUEUE, interval=0))
    assert (s["small"], s["big"]) == (5, 20)


def test_a_job_ending_on_a_backfill_instant_frees_capacity_for_the_backfill_there():
    # `short` ends at 8 s, a multiple of 4 s: that pass is a backfill cycle
    s = starts(site(*QUEUE[:1], job(0, "short", 1, "8s"), *QUEUE[2:], interval=4))
    assert s["small"] == 8


def test_a_partition_with_nodes_of_its_own_is_not_held_up():
    # given p1 on n1 and p2 on n2, `big` (p1) waiting for n1's two GPUs
    nodes = [
        {"name": "n1", "gpus": 2, "model": "H100-80GB", "labels": {"partition": "p1"}},
        {"name": "n2", "gpus": 2, "model": "H100-80GB", "labels": {"partition": "p2"}},
    ]
    p1, p2 = ({"node_selector": {"partition": p}} for p in ("p1", "p2"))
    sim = site(
        job(0, "long", 1, "20s", **p1),
        job(0, "other", 2, "5s", **p2),
        job(1, "big", 2, "5s", **p1),
        job(2, "small", 1, "3s", **p1),
        job(2, "small2", 1, "3s", **p2),
        interval=4,
        nodes=nodes,
    )
    s = starts(sim)
    # then `small` (p1, behind `big`, submitted at 2 s) waits for the backfill cycle of 4 s,
    # while `small2` (p2) starts at once when `other` ends at 5 s (a main pass)
    assert (s["small"], s["small2"]) == (4, 5)


def test_at_a_backfill_cycle_a_later_job_takes_planned_nodes_only_if_its_limit_ends_first():
    # given `big` (2 GPUs) planned on n1 at 30 s, when the time limits of what runs there end
    plan = (
        job(0, "long", 1, "20s", time_limit="30s"),
        job(0, "short", 1, "5s", time_limit="30s"),
        job(1, "big", 2, "5s", time_limit="10m"),
        job(2, "small", 1, "3s", time_limit="1m"),  # would end after 30 s: no backfill
        job(3, "quick", 1, "3s", time_limit="10s"),  # ends by 18 s from the cycle at 8 s
    )
    s = starts(site(*plan, interval=4))
    # then at the cycle of 8 s (after `short` ends at 5 s) only `quick` backfills; `small`
    # waits behind `big`, which starts when `long` ends at 20 s
    assert (s["quick"], s["big"], s["small"]) == (8, 20, 25)
    # (said when `small` is tried at 8 s, before `quick` takes the free GPU)
    at_8 = [r for r in reasons(site(*plan, interval=4), "small") if r[0] == 8]
    assert at_8[0][1:] == (
        PendingReason.Priority,
        "it would fit only on nodes Slurm's backfill plans for a job ahead of it, and its "
        "time limit ends after that job's planned start",
    )
    # and without the interval (every pass backfills, nothing planned) `small` goes first
    s = starts(site(*plan, interval=0))
    assert (s["small"], s["quick"]) == (5, 8)
