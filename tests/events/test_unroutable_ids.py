"""A job id that cannot be a subject token (issue 11, case 2): admission's refusal of it is
still publishable; any other event about it stays unroutable (a decider bug the host logs)."""

from __future__ import annotations

import pytest

from gpuledger import events as ev
from gpuledger.events.subjects import INVALID_ID_TOKEN, subject_for
from tests.fold.story import admission


def rejected(job_id: str) -> ev.JobRejected:
    return ev.JobRejected(job_id=job_id, tenant="t", reason="InvalidSpec", message="m")


@pytest.mark.parametrize("job_id", ["a.b*c >d", "", "x" * 500, "gl.>"])
def test_the_rejection_of_an_unroutable_id_has_a_subject(job_id: str) -> None:
    assert subject_for(rejected(job_id)) == f"gl.admission.{INVALID_ID_TOKEN}.JobRejected"


def test_a_valid_id_keeps_its_own_subject() -> None:
    assert subject_for(rejected("job-1")) == "gl.admission.job-1.JobRejected"


def test_other_events_about_an_unroutable_id_are_refused() -> None:
    admitted = admission("a.b*c >d", "t")
    with pytest.raises(ev.InvalidId):
        subject_for(admitted)
