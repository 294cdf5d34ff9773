"""Every job names who submitted it inside its tenant: a job file's `user:` or `gpuledger
submit --user`; a user that would break a subject is refused with one line and exit 2
before anything is published; a job without one is the documented default user `-`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuledger.services.cli.main import app
from gpuledger.services.domain.inputs.jobfile import JobFileError, job_spec

runner = CliRunner()


def test_a_job_file_names_its_user():
    spec = job_spec({"id": "j1", "tenant": "research", "user": "alice", "gpus": 1})
    assert (spec.user, spec.submitter) == ("alice", "alice")


def test_a_job_file_without_a_user_is_the_default_user_and_encodes_as_before():
    from gpuledger import events as ev

    spec = job_spec({"id": "j1", "tenant": "research", "gpus": 1})
    assert spec.submitter == "-"
    assert b"user" not in ev.encode(spec)


@pytest.mark.parametrize("user", ["a.b", "a*", "x>y", "a b", "", "u" * 129])
def test_a_user_that_would_break_a_subject_is_a_job_file_error(user):
    with pytest.raises(JobFileError) as info:
        job_spec({"id": "j1", "tenant": "research", "user": user, "gpus": 1})
    assert any(p.startswith("user: invalid user") for p in info.value.problems)


def test_submit_user_overrides_the_file_and_a_bad_one_exits_2_without_publishing(tmp_path):
    # given a valid job file and no NATS server anywhere
    f = tmp_path / "job.yaml"
    f.write_text("id: j1\ntenant: research\nuser: alice\ngpus: 1\n")
    # when submitted with a user holding a '.', then one error line, exit 2, nothing sent
    r = runner.invoke(app, ["submit", str(f), "--user", "bob.smith"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "error: --user: invalid user 'bob.smith': only letters, digits and _-:+@=,~ are "
        "allowed (no '.', '*', '>', spaces)"
    ]
    # and a bad user in the file is the file's one-line error
    f.write_text("id: j1\ntenant: research\nuser: 'a b'\ngpus: 1\n")
    r = runner.invoke(app, ["submit", str(f)])
    assert r.exit_code == 2
    assert "user: invalid user 'a b'" in r.output and len(r.output.strip().splitlines()) == 1
