"""Issue 32: a CI step follows its job from the command line, on a real nats-server with
authentication on, each service running as its own identity.

Given two tenants and a tenant's CI credential (which cannot read the stream), when the CI
step runs `gpuledger status JOB --creds ci.nk [--wait-for running|finished]`, then the answer
comes from the admission service's status queries and the exit code says what happened
(0 reached, 1 failed / rejected / cancelled / unknown, 3 nobody to ask, 4 not in time).
When the same credential acts on another tenant's job (`--tenant` of someone else), the
server's permission violation is the answer: `not permitted`, exit 1, not a time-out.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from gpuledger.services.cli.apply import publish_config
from tests.integration.cluster import Processes, cli

pytestmark = pytest.mark.integration

A, B = "team-a", "team-b"
CONFIG = {
    "cluster": {"nodes": [{"name": "node-1", "gpus": 4, "model": "A100-80GB"}]},
    "tenants": [{"name": A, "guaranteed": 4}, {"name": B, "guaranteed": 4}],
}


@pytest.fixture
async def ids(server, bus):
    """Both tenants' CI identities, admitted by the server."""
    server.add_principals(f"ci:{A}", f"ci:{B}")
    return server


def job_file(tmp_path: Path, job_id: str, tenant: str, **fields) -> Path:
    path = tmp_path / f"{job_id}.yaml"
    path.write_text(json.dumps({"id": job_id, "tenant": tenant, "gpus": 1, **fields}))
    return path


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def as_ci(ids, tenant: str):
    creds = str(ids.creds(f"ci:{tenant}"))

    def gl(*args: str) -> subprocess.CompletedProcess:
        return cli(*args, "--nats-url", ids.url, "--creds", creds, timeout=120)

    return gl


async def test_a_ci_step_follows_its_job_to_running_and_finished_and_branches_on_exit_codes(
    ids, bus, tmp_path
):
    await publish_config(ids.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    procs = Processes(ids, tmp_path / "config.yaml", tmp_path)
    try:
        procs.start_all(["node-1"])
        gl = as_ci(ids, A)

        # given a short job, submitted without waiting
        done = await asyncio.to_thread(
            gl, "submit", str(job_file(tmp_path, "quick", A, duration="2s"))
        )
        assert done.returncode == 0, (done.stderr, procs.logs())

        # when the step waits for it to run, then it is placed (or already past it): exit 0
        done = await asyncio.to_thread(
            gl, "status", "quick", "--wait-for", "running", "--timeout", "60"
        )
        assert done.returncode == 0, (done.stdout, done.stderr, procs.logs())
        header, row = done.stdout.splitlines()
        assert header.split()[:3] == ["NAME", "TENANT", "STATE"]
        assert row.split()[:3] in (
            ["quick", A, "running"],
            ["quick", A, "preempting"],
            ["quick", A, "completed"],
        )

        # when it waits for the end, then the job completed: exit 0, and JSON says so
        done = await asyncio.to_thread(
            gl, "status", "quick", "--wait-for", "finished", "--timeout", "60", "-o", "json"
        )
        assert done.returncode == 0, (done.stdout, done.stderr, procs.logs())
        answer = json.loads(done.stdout)
        assert (answer["job_id"], answer["tenant"], answer["state"]) == ("quick", A, "completed")
        assert answer["known"] is True and "spec" not in answer

        # given a job no node can hold: rejected by admission, and the wait ends with exit 1
        done = await asyncio.to_thread(gl, "submit", str(job_file(tmp_path, "huge", A, gpus=64)))
        assert done.returncode == 0, done.stderr
        done = await asyncio.to_thread(
            gl, "status", "huge", "--wait-for", "running", "--timeout", "60"
        )
        assert done.returncode == 1, (done.stdout, done.stderr)
        assert "huge rejected" in one_line_error(done)

        # given a long job: not finished within the time-out, exit 4 naming its state
        done = await asyncio.to_thread(
            gl, "submit", str(job_file(tmp_path, "long", A, duration="1h"))
        )
        assert done.returncode == 0, done.stderr
        done = await asyncio.to_thread(
            gl, "status", "long", "--wait-for", "finished", "--timeout", "3"
        )
        assert done.returncode == 4, (done.stdout, done.stderr)
        assert "long not finished within 3s" in one_line_error(done)

        # a job id the tenant does not have (another tenant's looks the same): exit 1
        await asyncio.to_thread(
            as_ci(ids, B), "submit", str(job_file(tmp_path, "b-job", B, duration="1h"))
        )
        for job in ("nobody-submitted-this", "b-job"):
            done = await asyncio.to_thread(gl, "status", job)
            assert done.returncode == 1, (done.stdout, done.stderr)
            assert "(UnknownJob)" in one_line_error(done)

        # bad input: exit 2, nothing asked
        done = await asyncio.to_thread(gl, "status", "quick", "--wait-for", "placed")
        assert done.returncode == 2 and "--wait-for" in one_line_error(done)
        done = await asyncio.to_thread(gl, "status", "no.dots")
        assert done.returncode == 2, done.stderr
    finally:
        procs.stop()


async def test_without_an_admission_service_the_status_of_a_job_exits_3(ids, bus):
    done = await asyncio.to_thread(as_ci(ids, A), "status", "any-job")
    assert done.returncode == 3, (done.stdout, done.stderr)
    assert "no admission service answers" in one_line_error(done)


@pytest.mark.parametrize(
    "args",
    [
        ("cancel", "b-job", "--tenant", B),
        ("scale", "b-job", "--replicas", "2", "--tenant", B),
        ("status", "b-job", "--tenant", B),
    ],
    ids=["cancel", "scale", "status"],
)
async def test_acting_on_another_tenants_job_is_not_permitted_rather_than_a_time_out(
    ids, bus, args
):
    # given tenant b's job, when tenant a's CI credential names tenant b
    await bus.publish_raw(
        f"gl.submit.{B}.b-job",
        json.dumps(
            {
                "type": "JobSubmitted.v1",
                "event_id": "sub-b-job",
                "job": {"job_id": "b-job", "tenant": B, "resources": {"gpus": 1}},
            }
        ).encode(),
    )
    done = await asyncio.to_thread(as_ci(ids, A), *args)
    # then the server's refusal is the answer (a time-out would exit 4 with "timeout")
    assert done.returncode == 1, (done.stdout, done.stderr)
    line = one_line_error(done)
    assert line.lower().startswith("error: not permitted: permissions violation"), line
    assert f".{B}." in line and "own tenant's jobs only" in line
    # and nothing was published for it
    assert await bus.last_message(f"gl.cancel.{B}.b-job") is None
    assert await bus.last_message(f"gl.scale.{B}.b-job") is None
