"""Arrays held as one record with counters (issue 44, item 4) decide as before: given arrays
larger than the fold's window of released tasks (services/domain/fold/arrays.py), when the
simulator runs them, then every decision is the one main made when every task was a record
from admission: the same placements (job, instant, members), evictions, preemption requests
and final states, whose digests below were taken from main before the change (c6bc6bba).

What may differ is said in docs/arrays.md ("What the fold holds"): a task not yet released
has no pending reason of its own (no `PendingReasonChanged` of its own), so the full logs
differ by those events only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.replay.scenario import from_document, load
from gpuledger.replay.simulator import Simulator, simulate, standard_services
from gpuledger.services.domain.fold import arrays

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

DECISIONS = (ev.GangPlaced, ev.GangEvicted, ev.PreemptionRequested, ev.GangCompleted)


def wide() -> dict:
    """Two tenants on 16 GPUs: ml's arrays borrow cv's half until cv's gang arrives (its
    guarantee: ml's borrowed tasks are preempted); a single task and then a whole array are
    cancelled."""
    return {
        "cluster": {"nodes": [{"name": "gpu-1", "gpus": 8}, {"name": "gpu-2", "gpus": 8}]},
        "tenants": [{"name": "ml", "guaranteed": 8}, {"name": "cv", "guaranteed": 8}],
        "timeline": [
            {"at": 0, "submit": {"id": "w", "tenant": "ml", "gpus": 1, "duration": "10m",
                                 "array": {"count": 40}}},
            {"at": 0, "submit": {"id": "m", "tenant": "ml", "gpus": 2, "duration": "7m",
                                 "array": "0-24%3"}},
            {"at": "2m", "submit": {"id": "cv-1", "tenant": "cv", "gpus": 8,
                                    "duration": "30m"}},
            {"at": "3m", "cancel": "w@37", "tenant": "ml"},
            {"at": "25m", "cancel": "m", "tenant": "ml"},
        ],
    }  # fmt: skip


def slurm_site() -> dict:
    """The `slurm` profile (tasks in numeric order) with a reservation for a starving gang
    and an array behind it that may backfill."""
    return {
        "cluster": {"nodes": [{"name": f"g{i}", "gpus": 4} for i in range(3)]},
        "tenants": [{"name": "hpc", "guaranteed": 12}],
        "policy": {"profile": "slurm", "reservation_after_s": 300},
        "timeline": [
            {"at": 0, "submit": {"id": "pre", "tenant": "hpc", "gpus": 4, "duration": "30m",
                                 "time_limit": "40m"}},
            {"at": "1m", "submit": {"id": "big", "tenant": "hpc", "gpus": 4, "replicas": 3,
                                    "duration": "20m", "time_limit": "30m"}},
            {"at": "2m", "submit": {"id": "s", "tenant": "hpc", "gpus": 1, "duration": "5m",
                                    "time_limit": "6m", "array": {"count": 30}}},
        ],
    }  # fmt: skip


def imported_durations() -> object:
    """An imported array whose tasks ran for different times (`array.durations_s`), behind a
    reserving gang: short tasks may backfill where long ones may not."""
    doc = {
        "cluster": {"nodes": [{"name": "g1", "gpus": 4}, {"name": "g2", "gpus": 4}]},
        "tenants": [{"name": "t", "guaranteed": 8}],
        "policy": {"reservation_after_s": 120},
        "timeline": [
            {"at": 0, "submit": {"id": "long", "tenant": "t", "gpus": 4, "duration": "1h"}},
            {"at": "1m", "submit": {"id": "gang", "tenant": "t", "gpus": 4, "replicas": 2,
                                    "duration": "30m"}},
            {"at": "2m", "submit": {"id": "d", "tenant": "t", "gpus": 1, "duration": "10m",
                                    "array": {"count": 24}}},
        ],
    }  # fmt: skip
    scenario = from_document(doc, "imported-durations")
    for i, (at, e) in enumerate(scenario.inputs):
        if isinstance(e, ev.JobSubmitted) and e.job.array:
            durations = tuple(60 * (1 + (7 * k) % 90) for k in range(e.job.array.count))
            arr = msgspec.structs.replace(e.job.array, durations_s=durations)
            job = msgspec.structs.replace(e.job, array=arr)
            scenario.inputs[i] = (at, msgspec.structs.replace(e, job=job))
    return scenario


SCENARIOS = {
    "arrays": lambda: load(EXAMPLES / "arrays.yaml"),
    "fair-tree": lambda: load(EXAMPLES / "fair-tree.yaml"),
    "wide": lambda: from_document(wide(), "wide"),
    "slurm-site": lambda: from_document(slurm_site(), "slurm-site"),
    "imported-durations": imported_durations,
}

EXPECTED = {  # sha256 of `decisions(...)` on main before the change (c6bc6bba)
    "arrays": "fca0d0cbe150298afac4e18377cbb598d02fde9099642da84cba5d7655d05150",
    "fair-tree": "11651b58d03638210230c58931b17be6af175a75591871edf72257d8d547deb1",
    "imported-durations": "393b953a006fb05a6f7acdfb7397e8779b0b0c2471c84d7e94433eaff154ba14",
    "slurm-site": "08e6f56038891f1ca6a189f08ada52226e7733c586fd146734599e5f328355bd",
    "wide": "3b1bd3eabd7ed0a7d765b272ee48f5b9b729cb4b003c90ccfa05782d5582a341",
}


def decisions(sim) -> list:
    """Every decision of a run, in log order, and every job's final state."""
    out: list = []
    for _, _, e in sim.log:
        if isinstance(e, DECISIONS):
            fields = {"type": type(e).__name__, "at": e.occurred_at_ms, "job": e.job_id}
            if isinstance(e, ev.GangPlaced):
                fields["members"] = ev.to_builtins(e.members)
            if isinstance(e, (ev.GangEvicted, ev.PreemptionRequested)):
                fields["reason"] = str(e.reason)
            out.append(fields)
    # a task that never ran may have no record (counted on its array: `message`)
    states = {
        j: [str(r.state), r.message if r.spec.array else ""]
        for j, r in sorted(sim.ledger.jobs.items())
        if r.array_parent is None or r.attempts
    }
    out.append(states)
    return out


def digest(sim) -> str:
    return hashlib.sha256(json.dumps(decisions(sim), sort_keys=True).encode()).hexdigest()


@pytest.fixture
def tightest_windows(monkeypatch):
    """Windows as small as the rule allows, for arrays of any size: exactly what could start
    at once (by default an array of at most 64 tasks is released whole at admission)."""
    monkeypatch.setattr(arrays, "RELEASE_WHOLE", 0)
    monkeypatch.setattr(arrays, "WINDOW_SLACK", 1)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_an_array_decides_as_when_every_task_was_a_record(name, tightest_windows):
    held_back: set[str] = set()
    scenario = SCENARIOS[name]()
    sim = Simulator(standard_services(scenario.nodes), check=True)
    sim.on_event = lambda *_: held_back.update(sim.ledger.open_arrays)
    for event in scenario.config:
        sim.publish(event)
    sim.schedule(scenario.inputs)
    sim.run(scenario.until_ms)
    assert held_back  # some array's tasks waited unreleased
    assert digest(sim) == EXPECTED[name]


if __name__ == "__main__":
    for name in sorted(SCENARIOS):
        print(f'    "{name}": "{digest(simulate(SCENARIOS[name](), check=True))}",')


def big_array_run(*more, until="5m"):
    doc = {
        "cluster": {"nodes": [{"name": "gpu-1", "gpus": 8}]},
        "tenants": [{"name": "ml", "guaranteed": 8}],
        "timeline": [
            {"at": 0, "submit": {"id": "big", "tenant": "ml", "user": "alice", "gpus": 1,
                                 "duration": "1h", "array": {"count": 5000}}},
            *more,
        ],
    }  # fmt: skip
    return simulate(from_document(doc, "big-array"), until_ms=_ms(until))


def _ms(text: str) -> int:
    return int(text.rstrip("m")) * 60_000


def test_the_projection_counts_an_arrays_unreleased_tasks_and_explains_one(tmp_path):
    from gpuledger.projections.queries import job_state_text, jobs_rows, why_report
    from gpuledger.projections.users import users_rows
    from tests.replay.simlog import projected

    sim = big_array_run()
    window = arrays.window_size(sim.ledger, sim.ledger.jobs["big"])
    with projected(sim, tmp_path / "p.duckdb") as con:
        (line,) = jobs_rows(con)
        tasks = jobs_rows(con, tasks=True)
        why = why_report(con, "big@4999")
        users = {r["user"]: r for r in users_rows(con)}
    # the array's line counts all 5,000 tasks; only the released ones have rows
    assert job_state_text(line) == "running 8/5000 done 0"
    assert len(tasks) == 1 + 8 + window
    # a task not released yet is explained from its array
    assert why["state"] == "pending" and why["message"].startswith("not released yet: big")
    # its user's pending jobs count every waiting task
    assert users["alice"]["pending_jobs"] == 5000 - 8


def test_cancelling_a_big_array_counts_its_unreleased_tasks_cancelled(tmp_path):
    from gpuledger.projections.queries import job_state_text, jobs_rows, why_report
    from tests.replay.simlog import projected

    sim = big_array_run({"at": "2m", "cancel": "big", "tenant": "ml"}, until="3m")
    parent = sim.ledger.jobs["big"]
    assert (str(parent.state), parent.tasks_ended) == ("cancelled", {"cancelled": 5000})
    with projected(sim, tmp_path / "p.duckdb") as con:
        (line,) = jobs_rows(con)
        why = why_report(con, "big@4999")
    assert job_state_text(line) == "cancelled 0/5000 done 5000"
    assert why["state"] == "cancelled"


def test_a_job_behind_an_array_counts_its_unreleased_tasks_ahead_of_it():
    from tests.replay.simlog import logged

    late = {"at": "1m", "submit": {"id": "late", "tenant": "ml", "user": "alice", "gpus": 1,
                                   "duration": "1m"}}  # fmt: skip
    sim = big_array_run(late, until="2m")
    (reason, *_) = logged(sim, ev.PendingReasonChanged, job_id="late")
    # 8 tasks run; the other 4,992 wait ahead of it, released or not (as when each was a record)
    assert reason.details["queue_position"] == 5000 - 8
