"""`gpuledger gateway`: a CI system with only curl submits, asks and cancels over HTTP, within
its tenant, against a real nats-server with admission as its own process and the gateway as a
real uvicorn server on a loopback port, connected as the `gateway` identity (issue 13)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from gpuledger import events as ev
from gpuledger.replay import live_player
from gpuledger.services.runtime import client_requests as cr
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.gateway import Gateway, create_app
from gpuledger.services.runtime.gateway import server as http_server
from gpuledger.services.runtime.gateway_tokens import Tokens, add_token
from tests.integration.cluster import EXAMPLES, cli
from tests.services.given import submitted
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration
THREE = EXAMPLES / "three-jobs.yaml"
JOB = "id: {id}\ntenant: {tenant}\ngpus: {gpus}\nduration: 3600\n"


@pytest.fixture
async def gateway(server, admission, tmp_path):
    """(base URL, {tenant: token}): the gateway on a free loopback port."""
    path = tmp_path / "tokens.yaml"
    tokens = {t: add_token(path, t) for t in ("team-a", "team-b")}
    tokens |= {u: add_token(path, "team-a", u) for u in ("alice", "bob")}  # users' tokens
    srv = http_server(
        create_app(Gateway(Tokens(path), access=server.access("gateway"))), "127.0.0.1", 0
    )
    task = asyncio.create_task(srv.serve())
    await eventually_async(lambda: srv.started or task.done(), what="the gateway to start")
    assert srv.started, task
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", tokens
    srv.should_exit = True
    await asyncio.wait_for(task, 10)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_submit_wait_admitted_then_status_then_retry_is_idempotent_and_other_content_conflicts(
    gateway, bus
):
    url, tokens = gateway
    async with httpx.AsyncClient(base_url=url, headers=auth(tokens["team-a"]), timeout=60) as http:
        assert (await http.get("/healthz")).json()["ok"] is True
        body = JOB.format(id="gw-1", tenant="team-a", gpus=1)
        r = await http.post(
            "/v1/tenants/team-a/jobs", params={"wait": "true", "timeout": "30"}, content=body
        )
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "admitted" and isinstance(r.json()["priority"], int)

        st = await http.get("/v1/tenants/team-a/jobs/gw-1")
        assert st.status_code == 200, st.text
        assert st.json()["known"] is True and st.json()["spec"]["resources"]["gpus"] == 1

        again = await http.post("/v1/tenants/team-a/jobs", content=body)
        assert again.status_code == 200, again.text
        assert again.json()["state"] == "already_submitted"
        as_json = {"id": "gw-1", "tenant": "team-a", "gpus": 1, "duration": 3600}
        retry_json = await http.post("/v1/tenants/team-a/jobs", json=as_json)  # same job, as JSON
        assert retry_json.status_code == 200 and retry_json.json()["state"] == "already_submitted"

        other = await http.post(
            "/v1/tenants/team-a/jobs", content=JOB.format(id="gw-1", tenant="team-a", gpus=2)
        )
        assert other.status_code == 409, other.text
        assert other.json()["reason"] == "JobIdConflict"
        assert "resources.gpus" in other.json()["message"]

        new = await http.post(
            "/v1/tenants/team-a/jobs", content=JOB.format(id="gw-2", tenant="team-a", gpus=1)
        )
        assert (
            new.status_code == 202 and new.json()["state"] == "submitted" and new.json()["seq"] > 0
        )

        # team-b holds a token but is not a configured tenant: admission rejects its job
        unknown = await http.post(
            "/v1/tenants/team-b/jobs",
            params={"wait": "true"},
            headers=auth(tokens["team-b"]),
            content=JOB.format(id="gw-b", tenant="team-b", gpus=1),
        )
        assert unknown.status_code == 422, unknown.text
        assert unknown.json()["reason"] and unknown.json()["message"]

    _, log = await live_player.fold(bus)
    submitted = [e.job.job_id for _, _, e in log if isinstance(e, ev.JobSubmitted)]
    assert sorted(submitted) == ["gw-1", "gw-2", "gw-b"]


async def test_tokens_act_only_within_their_tenant(gateway, bus):
    url, tokens = gateway
    body = JOB.format(id="gw-3", tenant="team-a", gpus=1)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        last = await bus.last_seq()
        missing = await http.post("/v1/tenants/team-a/jobs", content=body)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        wrong = await http.post(
            "/v1/tenants/team-a/jobs", content=body, headers=auth("not-a-token")
        )
        assert wrong.status_code == 401 and wrong.json()["reason"] == "Unauthorized"
        other_path = await http.post(
            "/v1/tenants/team-a/jobs", content=body, headers=auth(tokens["team-b"])
        )
        assert other_path.status_code == 403, other_path.text
        other_body = await http.post(
            "/v1/tenants/team-b/jobs", content=body, headers=auth(tokens["team-b"])
        )
        assert other_body.status_code == 403 and "tenant" in other_body.json()["message"]
        assert (
            await http.get("/v1/tenants/team-a/jobs/gw-3", headers=auth(tokens["team-b"]))
        ).status_code == 403
        assert await bus.last_seq() == last  # nothing published

        invalid = await http.post(
            "/v1/tenants/team-a/jobs",
            headers=auth(tokens["team-a"]),
            content="id: gw-4\ntenant: team-a\ngpu: 8\n",
        )
        assert invalid.status_code == 400, invalid.text
        assert invalid.json()["reason"] == "InvalidSpec"
        assert invalid.json()["message"].startswith("body: gpu")
        assert all("\n" not in line for line in invalid.json()["errors"])
        bad_id = await http.get("/v1/tenants/team-a/jobs/a.b*", headers=auth(tokens["team-a"]))
        assert bad_id.status_code == 400
        huge = await http.post(
            "/v1/tenants/team-a/jobs", headers=auth(tokens["team-a"]), content=b"x" * (1 << 20 | 1)
        )
        assert huge.status_code == 413
        alias = await http.post(
            "/v1/tenants/team-a/jobs", headers=auth(tokens["team-a"]), content="a: &x [1]\nb: *x\n"
        )
        assert alias.status_code == 400 and "aliases" in alias.json()["message"]
        assert await bus.last_seq() == last


async def test_cancel_own_job_and_not_another_tenants(gateway, bus):
    url, tokens = gateway
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        r = await http.post(
            "/v1/tenants/team-a/jobs?wait=true",
            headers=auth(tokens["team-a"]),
            content=json.dumps({"id": "gw-5", "tenant": "team-a", "gpus": 1, "duration": 3600}),
        )
        assert r.status_code == 200, r.text
        last = await bus.last_seq()
        theirs = await http.delete("/v1/tenants/team-b/jobs/gw-5", headers=auth(tokens["team-b"]))
        assert theirs.status_code == 404 and theirs.json()["reason"] == "UnknownJob"
        unknown = await http.get("/v1/tenants/team-b/jobs/gw-5", headers=auth(tokens["team-b"]))
        assert unknown.status_code == 404

        # job ids are per tenant: team-a's id is answered as an id nobody has
        def seen(r: httpx.Response, job: str) -> tuple[int, str]:
            return r.status_code, r.text.replace(job, "ID")

        b = auth(tokens["team-b"])
        for theirs_r, method in ((theirs, http.delete), (unknown, http.get)):
            nobody = await method("/v1/tenants/team-b/jobs/gw-none", headers=b)
            assert seen(theirs_r, "gw-5") == seen(nobody, "gw-none")
        assert await bus.last_seq() == last  # nothing published
        own = await http.post(
            "/v1/tenants/team-b/jobs",
            headers=b,
            content=JOB.format(id="gw-5", tenant="team-b", gpus=1),
        )
        assert own.status_code == 202 and own.json()["state"] == "submitted", own.text  # no 409
        mine = await http.delete("/v1/tenants/team-a/jobs/gw-5", headers=auth(tokens["team-a"]))
        assert mine.status_code == 202, mine.text
        assert mine.json()["state"] == "cancel_requested"

        async def state() -> str:
            got = await http.get("/v1/tenants/team-a/jobs/gw-5", headers=auth(tokens["team-a"]))
            return got.json()["state"]

        await eventually_async(
            lambda: _is(state(), "cancelled"), what="the gateway to show gw-5 cancelled"
        )


async def test_a_users_token_submits_only_as_its_user(gateway, bus, server):
    # given alice's token (team-a's user alice) and team-a's own token
    url, tokens = gateway
    alice, team = auth(tokens["alice"]), auth(tokens["team-a"])
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        # when alice posts a job naming no user, then it is hers
        r = await http.post(
            "/v1/tenants/team-a/jobs?wait=true",
            headers=alice,
            content=JOB.format(id="u-1", tenant="team-a", gpus=1),
        )
        assert r.status_code == 200 and r.json()["state"] == "admitted", r.text
        st = await http.get("/v1/tenants/team-a/jobs/u-1", headers=alice)
        assert st.json()["spec"]["user"] == "alice"
        # when alice posts a job naming bob, then it is refused and nothing is published
        last = await bus.last_seq()
        as_bob = JOB.format(id="u-2", tenant="team-a", gpus=1) + "user: bob\n"
        refused = await http.post("/v1/tenants/team-a/jobs", headers=alice, content=as_bob)
        assert refused.status_code == 403, refused.text
        assert refused.json()["reason"] == "NotYourUser"
        assert "user alice submits as alice only" in refused.json()["message"]
        assert await bus.last_seq() == last
        # and team-a's own token vouches for any user it names (the control)
        vouched = await http.post("/v1/tenants/team-a/jobs", headers=team, content=as_bob)
        assert vouched.status_code == 202, vouched.text
    # and the server holds a user's request to that user on its own: the gateway's key asking
    # on alice's intake subject for a job naming bob is refused by the intake, not stored
    gw = await Bus.connect(server.url, **server.client_options("gateway"))
    try:
        last = await bus.last_seq()
        out = await cr.publish_submission(
            gw, submitted(id="u-3", tenant="team-a", user="bob"), as_user="alice"
        )
        assert (out.status, out.reason) == (cr.REFUSED, "NotYourUser")
        assert await bus.last_seq() == last
    finally:
        await gw.close()


async def test_a_users_token_cancels_only_its_users_jobs_and_sees_its_tenants(gateway, bus):
    # given bob's job, submitted by team-a's token naming bob
    url, tokens = gateway
    alice, bob = auth(tokens["alice"]), auth(tokens["bob"])
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        r = await http.post(
            "/v1/tenants/team-a/jobs?wait=true",
            headers=auth(tokens["team-a"]),
            content=JOB.format(id="u-9", tenant="team-a", gpus=1) + "user: bob\n",
        )
        assert r.status_code == 200, r.text
        # then alice's token sees it (its tenant's queue, like squeue)
        assert (await http.get("/v1/tenants/team-a/jobs/u-9", headers=alice)).status_code == 200
        # but cannot cancel it: the answer is word for word that for an id nobody has
        last = await bus.last_seq()
        theirs = await http.delete("/v1/tenants/team-a/jobs/u-9", headers=alice)
        nobody = await http.delete("/v1/tenants/team-a/jobs/u-none", headers=alice)
        assert theirs.status_code == 404 and theirs.json()["reason"] == "UnknownJob"
        assert (theirs.status_code, theirs.text.replace("u-9", "ID")) == (
            nobody.status_code,
            nobody.text.replace("u-none", "ID"),
        )
        assert await bus.last_seq() == last  # nothing published
        # and bob's token cancels it
        mine = await http.delete("/v1/tenants/team-a/jobs/u-9", headers=bob)
        assert mine.status_code == 202 and mine.json()["state"] == "cancel_requested", mine.text
        # and a user's token of team-a is no token of team-b
        other = await http.get("/v1/tenants/team-b/jobs/u-9", headers=bob)
        assert other.status_code == 403


def test_gateway_token_and_a_strictly_checked_tokens_file(tmp_path):
    path = tmp_path / "tokens.yaml"
    out = cli("gateway", "token", "team-a", "--tokens", str(path))
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    assert len(token) > 30 and token not in path.read_text()
    assert Tokens(path).tenant_of(token) == "team-a"
    assert path.stat().st_mode & 0o077 == 0
    # a user's token: `gateway token TENANT USER`, as `auth add-user TENANT USER`
    users = cli("gateway", "token", "team-a", "alice", "--tokens", str(path))
    assert users.returncode == 0, users.stderr
    assert Tokens(path).owner_of(users.stdout.strip()) == ("team-a", "alice")
    assert "user:team-a:alice:" in path.read_text()
    bad_user = cli("gateway", "token", "team-a", "bob.smith", "--tokens", str(path))
    assert bad_user.returncode == 2
    assert bad_user.stderr.strip() == (
        "error: invalid user 'bob.smith': only letters, digits and _-:+@=,~ are allowed "
        "(no '.', '*', '>', spaces)"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"team-a: [{token}]\nteam-b: nope\n")
    refused = cli("gateway", "--tokens", str(bad), "--nats-url", "nats://127.0.0.1:1")
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert (
        lines[0].startswith(f"error: {bad}: team-a[0]: expected 'sha256:'")
        and token not in refused.stderr
    )
    assert lines[1].startswith(f"error: {bad}: team-b: expected a list")


async def _is(value, want) -> bool:
    return await value == want
