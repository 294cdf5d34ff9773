"""The jobs fold (services/domain/fold/jobs.py, with arrays.py, replicas.py, queue.py):
a job's life, the queue, arrays' tasks and services' replicas."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.services.domain.fold import jobs
from tests.fold.story import admitted, given, node, placed, submitted, when


def test_the_jobs_fold_handles_the_client_and_admission_events():
    assert {ev.JobSubmitted, ev.JobAdmitted, ev.JobCancelled, ev.ServiceScaled} <= set(
        jobs.FOLD.handlers
    )
    assert "pending" in jobs.FOLD.owns and "jobs" in jobs.FOLD.owns


def test_an_admitted_job_waits_in_the_queue_and_a_cancel_takes_it_out():
    # given a submitted job of 8 GPUs
    ledger = given(node(), submitted("a"))
    assert ledger.submitted == {"a"} and ledger.jobs["a"].state == "submitted"
    # when it is admitted
    when(ledger, admitted("a"))
    # then it is pending, queued, and its tenant's pending capacity counts it
    assert ledger.pending == {"a"} and ledger.submitted == set()
    assert ledger.quota.pending_gpu_milli == {"org/a": 8000}
    # when its tenant cancels it
    when(ledger, ev.JobCancelled(job_id="a", tenant="org/a"))
    # then it ends at once and nothing waits
    assert ledger.jobs["a"].state == "cancelled" and ledger.pending == set()
    assert ledger.quota.pending_gpu_milli == {"org/a": 0}


def test_a_second_submission_with_other_content_is_refused_with_its_differences():
    ledger = given(submitted("a", gpus=8))
    refusal = when(ledger, submitted("a", gpus=4))
    assert refusal is not None and refusal.code == "DuplicateJob"
    (answer,) = ledger.intake.refusals.values()
    assert answer.reason == "JobIdConflict" and answer.details["differences"] == [
        "resources.gpus: stored 8, new 4"
    ]


def test_an_array_runs_as_its_tasks_and_counts_them():
    # given an array of 3 one-GPU tasks
    ledger = given(node(), submitted("arr", gpus=1, array=ev.ArraySpec(count=3)))
    # when it is admitted and its first task is placed
    when(ledger, admitted("arr"), placed("arr@0", ("n1", (0,))))
    # then its tasks are jobs of their own, and the array runs with them
    assert [t.job_id for t in ledger.tasks_of("arr")] == ["arr@0", "arr@1", "arr@2"]
    assert ledger.pending == {"arr@1", "arr@2"}
    parent = ledger.jobs["arr"]
    assert parent.state == "running" and parent.message == "3 tasks: 1 running, 2 pending"
    # when it is cancelled
    when(ledger, ev.JobCancelled(job_id="arr", tenant="org/a"))
    # then the unplaced tasks end now, the placed one is asked to stop
    assert [t.state for t in ledger.tasks_of("arr")] == ["running", "cancelled", "cancelled"]
    assert ledger.agents.cancelling == {"arr@0#1"}
    assert parent.message == "3 tasks: 1 running, 0 pending, 2 cancelled"


def test_a_service_runs_as_its_replicas_and_scaling_down_stops_the_highest():
    # given a service of 2 one-GPU replicas, admitted
    ledger = given(node(), submitted("web", gpus=1, kind="service", replicas=2), admitted("web"))
    assert [r.job_id for r in ledger.replicas_of("web")] == ["web~0", "web~1"]
    # when replica 0 is placed
    when(ledger, placed("web~0", ("n1", (0,))))
    # then the service runs
    assert ledger.jobs["web"].state == "running" and ledger.jobs["web"].replicas_up == 1
    # when it is scaled down to 1
    when(ledger, ev.ServiceScaled(job_id="web", tenant="org/a", replicas=1))
    # then the pending replica 1 is cancelled, replica 0 runs on
    assert ledger.jobs["web~1"].state == "cancelled" and ledger.pending == set()
    assert ledger.jobs["web~0"].state == "running"
