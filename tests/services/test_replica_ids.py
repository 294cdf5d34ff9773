"""Replica ids `<service>~<i>` cannot collide with a user's job id (issue 29): `~` is refused
in every job id a client submits, with a clear error, at admission, at the HTTP gateway, in
`gpuledger submit` and in `gpuledger check`. Before, a user job `svc~1` submitted first took
the id of the service's second replica, which was then never created."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.cli.main import app
from gpuledger.services.runtime.gateway import HttpError, job_event
from tests.services.given import cluster, fold, given, of_type, submitted, submitted_json

FLEET = cluster({"name": "n1", "gpus": 8}, tenants=[{"name": "a", "guaranteed": 8}])
RESERVED = "'~' is reserved for the replicas of services (<service>~<index>); use another character"
runner = CliRunner()


def test_given_a_user_job_named_like_a_replica_when_admission_decides_then_it_is_refused():
    ledger = given(*FLEET, submitted_json(job_id="svc~1", tenant="a", resources={"gpus": 1}))
    assert "svc~1" not in ledger.jobs, "the fold keeps no record under a replica's id"
    (out,) = Admission().decide(ledger, 0)
    assert isinstance(out, ev.RequestRefused) and out.reason == "InvalidSpec"
    assert (out.job_id, out.request) == ("svc~1", "JobSubmitted")
    assert out.message == f"invalid job id 'svc~1': {RESERVED}"


def test_and_admissions_own_check_refuses_it_too():
    from gpuledger.services.admission.decider import Rejection, check

    ledger = given(*FLEET)
    spec = ev.JobSpec(job_id="svc~1", tenant="a", resources=ev.Resources(gpus=1))
    with pytest.raises(Rejection) as err:
        check(ledger, spec, Admission().fleet_summary(ledger))
    assert err.value.reason == "InvalidSpec" and RESERVED in err.value.message


def test_then_the_service_submitted_after_it_gets_every_replica():
    ledger = given(*FLEET, submitted_json(job_id="svc~1", tenant="a", resources={"gpus": 1}))
    fold(ledger, Admission().decide(ledger, 0))
    fold(ledger, [submitted(at_ms=1, id="svc", tenant="a", kind="service", replicas=2, gpus=1)])
    fold(ledger, of_type(Admission().decide(ledger, 1), ev.JobAdmitted))
    assert [r.job_id for r in ledger.replicas_of("svc")] == ["svc~0", "svc~1"]
    assert ledger.jobs["svc~1"].service == "svc" and ledger.jobs["svc~1"].state == "pending"


def test_the_gateway_refuses_the_id_with_400():
    with pytest.raises(HttpError) as err:
        job_event({"id": "svc~1", "tenant": "a", "gpus": 1}, "a")
    assert err.value.status == 400 and RESERVED in str(err.value.message)


@pytest.mark.parametrize("command", [("check",), ("submit", "--nats-url", "nats://127.0.0.1:1")])
def test_submit_and_check_refuse_it_in_one_line_with_exit_2(tmp_path, command):
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"id": "svc~1", "tenant": "a", "gpus": 1}))
    result = runner.invoke(app, [*command, str(job)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {job}: id: invalid job id 'svc~1': {RESERVED}"


def test_check_refuses_it_in_a_client_event_too(tmp_path):
    path = tmp_path / "event.json"
    path.write_text(
        '{"type": "JobSubmitted.v1", "job": {"job_id": "svc~1", "tenant": "a",'
        ' "resources": {"gpus": 1}}}'
    )
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: {path}: job: invalid job id 'svc~1': {RESERVED}"


def test_replica_ids_themselves_stay_valid_subject_tokens():
    assert ev.validate_token("job id", "svc~1") == "svc~1"
    assert ev.subject_for(ev.GangCompleted(job_id="svc~1", allocation_id="svc~1#1")).startswith(
        "gl.sched.svc~1."
    )
