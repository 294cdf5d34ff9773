"""The projection's `refusals` table files a tenant's refused request under its publisher
(projections/mappers/state.py `_about`, `Ledger.filed_under`; issue 44 item 8): given tenant
org/b's `j1` kept under the key `j1~~<digest>` (org/a had `j1` first), when org/a publishes a
raw submission naming that key, or a cancel naming org/b on org/a's own subject, then the
refusal row names org/a's own key, never org/b's job, as admission's `RequestRefused` does."""

from __future__ import annotations

from gpuledger import events as ev
from gpuledger.events.ids import tenant_job_key
from gpuledger.projections.mappers import APPEND_COLUMNS, Projection
from gpuledger.services.admission.decider import Admission
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import submitted_json
from tests.services.test_tenant_job_ids import B_KEY, FLEET, cancel


def refusals_after(*requests: tuple[str, ev.Event]) -> tuple[Projection, list[dict]]:
    """Both tenants' `j1` admitted and placed, then `requests` on the subjects given: the
    projection and its refusal rows."""
    p, seq = Projection(), 0

    def apply(subject: str, e: ev.Event) -> None:
        nonlocal seq
        seq += 1
        p.apply(seq, subject, e)

    for e in (
        *FLEET,
        submitted_json(job_id="j1", tenant="org/a", resources={"gpus": 1}),
        submitted_json(job_id="j1", tenant="org/b", resources={"gpus": 1}),
    ):
        apply(ev.subject_for(e), e)
    while out := Admission().decide(p.ledger, 100) + Scheduler().decide(p.ledger, 100):
        for e in out:
            apply(ev.subject_for(e), e)
    assert p.jobs[B_KEY].tenant == "org/b" and p.jobs[B_KEY].state == "running"
    for subject, e in requests:
        apply(subject, e)
    cols = APPEND_COLUMNS["refusals"]
    return p, [dict(zip(cols, r, strict=True)) for r in p.drain().rows("refusals")]


def test_a_raw_submission_of_another_tenants_key_is_filed_under_the_publisher():
    raw = submitted_json(job_id=B_KEY, tenant="org/a", resources={"gpus": 1})
    p, (row,) = refusals_after((f"gl.submit.org/a.{B_KEY}", raw))
    assert (row["type"], row["code"]) == ("JobSubmitted", "InvalidSpec")
    # filed under org/a's own key of the name it gave (admission's correlation id), not B_KEY
    assert row["job_id"] == tenant_job_key("org/a", B_KEY) != B_KEY
    assert p.jobs[B_KEY].state == "running"  # org/b's job untouched


def test_a_cancel_naming_another_tenant_is_filed_under_the_tenant_of_its_subject():
    # org/c publishes on its own subject a cancel whose payload names org/b's tenant
    forged = cancel("org/b", "j1")
    p, (row,) = refusals_after(("gl.cancel.org/c.j1", forged))
    assert row["code"] == "WrongSubject"
    assert row["job_id"] == tenant_job_key("org/c", "j1")  # neither org/a's j1 nor org/b's
    assert p.jobs["j1"].state == p.jobs[B_KEY].state == "running"


def test_a_refusal_about_the_publishers_own_job_is_filed_under_that_job():
    # org/b's cancel of its own j1 on another job's subject of its own
    p, (row,) = refusals_after(("gl.cancel.org/b.j2", cancel("org/b", "j1")))
    assert (row["code"], row["job_id"]) == ("WrongSubject", B_KEY)
