"""Issue 43 (users inside tenants) and issue 44 item 4 (bounded pending work per tenant)
against a real nats-server, each principal with its own real credential (docs/security.md,
the rows "per-user credential" and "submit limits").

Given tenant `research` with a CI identity and per-user identities for alice and bob
(`gpuledger auth add-user`), its submit limits configured, and the admission service running
as its own identity (it answers the intake), when each key submits, cancels or holds as
itself or as someone else, then the server refuses what its permissions do not allow
(`Permissions Violation`), the intake refuses what the folded state does not (another user's
job: the same answer as for no job; a submission over a limit: `SubmitLimit`), and nothing
refused is stored; the positive control of each rule is stored.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import nats
import nats.errors
import pytest

from gpuledger.services.cli.apply import publish_config
from gpuledger.services.runtime.auth import AuthDir, permissions, user_principal
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.client_requests import ask_status
from tests.integration.cluster import ROOT, Processes, cli
from tests.integration.test_security import Client, cancellation, one_line_error, stored
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration

R = "research"
CONFIG = {
    "cluster": {"nodes": [{"name": "node-1", "gpus": 4, "model": "A100-80GB"}]},
    "tenants": [
        {
            "name": R,
            "guaranteed": 4,
            "limits": {"submit_jobs": 4, "array_size": 8},
            "users": {"default": {"submit_jobs": 2}},
        }
    ],
}
ALICE, BOB = user_principal(R, "alice"), user_principal(R, "bob")


@pytest.fixture
async def live(server, bus, tmp_path):
    """research's CI key and alice's and bob's keys admitted by the server; the configuration
    published; admission running as its own identity."""
    server.add_principals(f"ci:{R}")
    server.add_principals(ALICE, BOB)
    await publish_config(server.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    p = Processes(server, tmp_path / "config.yaml", tmp_path)
    p.start("admission")
    yield server
    p.stop()


def gl(server, principal: str, *args: str) -> subprocess.CompletedProcess:
    """The CLI as `principal` (its own key file)."""
    creds = str(server.creds(principal))
    return cli(*args, "--nats-url", server.url, "--creds", creds, timeout=90)


def user_job(tmp_path: Path, job_id: str, user: str | None = None, **extra) -> Path:
    path = tmp_path / f"{job_id}.yaml"
    doc = {"id": job_id, "tenant": R, "gpus": 1, "duration": "1h", **extra}
    if user is not None:
        doc["user"] = user
    path.write_text(json.dumps(doc))
    return path


async def pending_in_admissions_fold(bus: Bus, job_id: str) -> None:
    """Wait until the admission service's fold holds `job_id` as pending (what the intake
    counts against the limits)."""
    st = await ask_status(
        bus, R, job_id, timeout=30, wait_for_service=True, until=lambda s: s.state == "pending"
    )
    assert st is not None and st.state == "pending"


async def test_a_user_key_submits_only_as_its_own_user(live, bus, tmp_path):
    # when alice's key submits a job naming no user, then it is hers
    done = await asyncio.to_thread(gl, live, ALICE, "submit", str(user_job(tmp_path, "a1")))
    assert done.returncode == 0, done.stderr
    st = await ask_status(bus, R, "a1", timeout=30, wait_for_service=True, until=lambda s: s.known)
    assert st.spec.user == "alice"
    # when it submits a job naming bob, then the intake refuses it and nothing is stored
    done = await asyncio.to_thread(
        gl, live, ALICE, "submit", str(user_job(tmp_path, "as-bob", "bob"))
    )
    assert done.returncode == 1
    assert one_line_error(done) == (
        "error: not submitted as-bob: NotYourUser: the credential of user alice submits as "
        "alice only; this job names user bob"
    )
    assert not await stored(bus, f"gl.submit.{R}.as-bob")
    # control: the tenant's CI key vouches for any user it names
    done = await asyncio.to_thread(
        gl, live, f"ci:{R}", "submit", str(user_job(tmp_path, "ci-bob", "bob"))
    )
    assert done.returncode == 0, done.stderr
    assert await stored(bus, f"gl.submit.{R}.ci-bob")


async def test_a_user_key_may_not_ask_on_another_users_or_the_tenants_subjects(live, bus):
    from tests.integration.cluster import submission

    alice = await Client.connect(live, ALICE)
    try:
        for subject in (
            f"glu.submit.{R}.bob.x",  # bob's subject
            f"glr.submit.{R}.x",  # the tenant's CI subject (vouches for any user)
            f"gl.submit.{R}.x",  # the stream itself
        ):
            call = alice.nc.request(subject, submission("x", R), timeout=0.25)
            await alice.refused(call, subject)
        assert not await stored(bus, f"gl.submit.{R}.x")
    finally:
        await alice.close()


async def test_a_user_key_cancels_and_holds_only_its_own_users_jobs(live, bus, tmp_path):
    # given bob's job and alice's job, each submitted with its owner's key
    for who, job in ((BOB, "b1"), (ALICE, "a1")):
        done = await asyncio.to_thread(gl, live, who, "submit", str(user_job(tmp_path, job)))
        assert done.returncode == 0, done.stderr
    await pending_in_admissions_fold(bus, "b1")
    await pending_in_admissions_fold(bus, "a1")
    # when alice's key cancels and holds bob's job, then both are refused and nothing is stored
    for verb in ("cancel", "hold"):
        theirs = await asyncio.to_thread(gl, live, ALICE, verb, "b1")
        assert theirs.returncode == 1 and "UnknownJob" in one_line_error(theirs)
    assert not await stored(bus, f"gl.cancel.{R}.b1")
    assert not await stored(bus, f"gl.ctl.{R}.b1.>")
    # and the intake's answer about bob's job is word for word its answer about no job
    alice = await Client.connect(live, ALICE)
    try:
        answers = {}
        for job in ("b1", "nobody"):
            body = cancellation(job, R)
            reply = await alice.nc.request(f"glu.cancel.{R}.alice.{job}", body, timeout=10)
            answers[job] = json.loads(reply.data)
    finally:
        await alice.close()
    assert answers["b1"]["reason"] == "UnknownJob"
    assert json.dumps(answers["b1"]).replace("b1", "X") == json.dumps(answers["nobody"]).replace(
        "nobody", "X"
    )
    assert not await stored(bus, f"gl.cancel.{R}.b1")
    # control: her own job
    done = await asyncio.to_thread(gl, live, ALICE, "hold", "a1")
    assert done.returncode == 0, done.stderr
    done = await asyncio.to_thread(gl, live, ALICE, "cancel", "a1")
    assert done.returncode == 0, done.stderr
    assert await stored(bus, f"gl.cancel.{R}.a1") and await stored(bus, f"gl.ctl.{R}.a1.>")


async def test_a_submission_over_a_users_limit_is_refused_and_nothing_is_stored(
    live, bus, tmp_path
):
    # given alice with 2 jobs pending (her bound: 2)
    for job in ("a1", "a2"):
        done = await asyncio.to_thread(gl, live, ALICE, "submit", str(user_job(tmp_path, job)))
        assert done.returncode == 0, done.stderr
        await pending_in_admissions_fold(bus, job)
    # when she submits a third, then the intake refuses it: one line, exit 1, nothing stored
    done = await asyncio.to_thread(gl, live, ALICE, "submit", str(user_job(tmp_path, "a3")))
    assert done.returncode == 1
    assert one_line_error(done) == (
        "error: not submitted a3: SubmitLimit: user alice of tenant research has 2 jobs pending"
        " or running and this submission adds 1; at most 2 at once (submit_jobs)"
    )
    assert not await stored(bus, f"gl.submit.{R}.a3")
    # control: bob is within his own bound
    done = await asyncio.to_thread(gl, live, BOB, "submit", str(user_job(tmp_path, "b1")))
    assert done.returncode == 0, done.stderr


async def test_a_tenants_array_over_array_size_is_refused_and_nothing_is_stored(
    live, bus, tmp_path
):
    # when the CI key submits an array larger than the tenant's array_size (8)
    path = user_job(tmp_path, "sweep", array={"count": 9})
    done = await asyncio.to_thread(gl, live, f"ci:{R}", "submit", str(path))
    # then: one line naming the bound, exit 1, nothing stored
    assert done.returncode == 1
    assert one_line_error(done) == (
        "error: not submitted sweep: SubmitLimit: array of 9 tasks: tenant research may submit"
        " arrays of at most 8 tasks (array_size)"
    )
    assert not await stored(bus, f"gl.submit.{R}.sweep")
    # control: an array within it
    ok = user_job(tmp_path, "sweep-ok", array={"count": 4})
    done = await asyncio.to_thread(gl, live, f"ci:{R}", "submit", str(ok))
    assert done.returncode == 0, done.stderr


async def test_a_submission_past_the_intake_over_the_tenants_limit_is_rejected_by_admission(
    live, bus, tmp_path
):
    """The operator publishes into the stream itself (no intake): admission's fold is the
    judge of record, and the job is rejected, never pending."""
    from tests.integration.cluster import submission

    for i in range(5):  # the tenant's bound: 4
        await bus.publish_raw(f"gl.submit.{R}.op-{i}", submission(f"op-{i}", R))
    st = await ask_status(
        bus,
        R,
        "op-4",
        timeout=30,
        wait_for_service=True,
        until=lambda s: s.state in ("pending", "rejected"),
    )
    assert (st.state, st.reason) == ("rejected", "SubmitLimit")
    assert "tenant research has 4 jobs pending or running" in st.message


@pytest.mark.parametrize(
    "tenant, user, says",
    [
        ("nowhere", "alice", "unknown tenant 'nowhere' for user 'alice'"),
        (R, "bob.smith", "invalid user 'bob.smith'"),
        (R, "b*", "invalid user 'b*'"),
        (R, "b>", "invalid user 'b>'"),
        (R, "bob smith", "invalid user 'bob smith'"),
        ("bad tenant", "alice", "invalid tenant 'bad tenant'"),
    ],
)
def test_add_user_with_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path, tenant, user, says
):
    auth_dir = tmp_path / "auth"
    assert cli("auth", "init", str(auth_dir), "--tenants", R, cwd=ROOT).returncode == 0
    before = {p.name: p.read_bytes() for p in auth_dir.iterdir()}
    done = cli("auth", "add-user", str(auth_dir), tenant, user)
    assert done.returncode == 2
    assert says in one_line_error(done)
    assert {p.name: p.read_bytes() for p in auth_dir.iterdir()} == before


def test_add_user_writes_one_key_per_user_that_never_meet(tmp_path):
    auth_dir = tmp_path / "auth"
    assert cli("auth", "init", str(auth_dir), "--tenants", R).returncode == 0
    done = cli("auth", "add-user", str(auth_dir), R, "a@b", "a+b", "a:b")
    assert done.returncode == 0, done.stderr
    found = AuthDir(auth_dir).principals()
    users = [user_principal(R, u) for u in ("a@b", "a+b", "a:b")]
    assert len({found[u].file for u in users}) == 3
    publish = permissions(user_principal(R, "a@b"))["publish"]
    assert f"glu.submit.{R}.a@b.>" in publish
    assert not [p for p in publish if p.startswith(("gl.", "glr.", f"glu.submit.{R}.a+b"))]


async def test_a_user_key_asks_on_its_own_subject_and_is_answered(live):
    """The positive control of the raw path: alice asks on her own subject and is answered."""
    from tests.integration.cluster import submission

    body = json.loads(submission("raw-a", R))
    body["job"]["user"] = "alice"
    alice = await Client.connect(live, ALICE)
    try:

        async def ask() -> dict | None:
            try:
                reply = await alice.nc.request(
                    f"glu.submit.{R}.alice.raw-a", json.dumps(body).encode(), timeout=5
                )
            except nats.errors.NoRespondersError:
                return None
            return json.loads(reply.data)

        answer = await eventually_async(ask, 20, "the intake answers alice")
        assert answer["seq"] > 0
    finally:
        await alice.close()
