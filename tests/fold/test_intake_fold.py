"""The intake fold (services/domain/fold/intake.py): the acceptance step (producer role,
leader epoch) and the client requests waiting for admission's answer."""

from __future__ import annotations

import pytest
from msgspec.structs import replace

from gpuledger import events as ev
from gpuledger.services.domain.fold import intake
from gpuledger.services.domain.fold.refusals import Refused
from tests.fold.story import admitted, given, node, submitted, when


def test_the_intake_fold_handles_dead_letters_and_refusals():
    assert set(intake.FOLD.handlers) == {ev.DeadLettered, ev.RequestRefused}


def test_a_decision_of_a_deposed_leader_changes_nothing():
    # given admission's leader of epoch 2 has decided
    ledger = given(node(), submitted("a"), submitted("b"))
    when(ledger, replace(admitted("a"), leader_epoch=2))
    # when a decision of epoch 1 arrives
    refusal = when(ledger, replace(admitted("b"), leader_epoch=1))
    # then it is ignored as stale and counted
    assert refusal is not None and refusal.code == "StaleLeaderEpoch"
    assert ledger.jobs["b"].state == "submitted" and ledger.intake.stale_decisions == 1
    assert ledger.intake.leader_epochs == {"admission": 2}


def test_a_decision_from_the_wrong_role_is_refused_whole():
    ledger = given(node(), submitted("a"))
    forged = replace(admitted("a"), producer="node-agent/n1")
    with pytest.raises(Refused, match="WrongProducer"):
        ledger.apply(9, forged)
    assert ledger.jobs["a"].state == "submitted" and ledger.last_seq == 9


def test_an_unreadable_first_submission_waits_for_its_rejection():
    # given a submission of job x that could not be decoded
    dead = ev.DeadLettered(
        subject="gl.submit.a.x", stream_seq=3, reason="bad json", payload_head="{"
    )
    ledger = given(dead)
    # then it waits for admission to reject it, under its id
    assert set(ledger.intake.invalid_submissions) == {"x"} and ledger.intake.dead_letters == 1
    # when admission rejects it
    answer = {"reason": "InvalidSpec", "message": "unreadable", "producer": "admission/0"}
    when(ledger, ev.JobRejected(job_id="x", tenant="a", **answer))
    # then the job exists as a rejection, and nothing waits
    assert ledger.jobs["x"].state == "rejected" and ledger.jobs["x"].unreadable
    assert ledger.intake.invalid_submissions == {}
