"""`gpuledger gateway`: a CI system with only curl submits, asks and cancels over HTTP, within
its tenant, against a real nats-server with admission as its own process and the gateway as a
real uvicorn server on a loopback port, connected as the `gateway` identity (issue 13)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import httpx
import pytest

from gpuledger import events as ev
from gpuledger.replay import live_player
from gpuledger.services.cli.apply import publish_config
from gpuledger.services.runtime import client_requests as cr
from gpuledger.services.runtime.bus import Bus
from gpuledger.services.runtime.gateway import Gateway, create_app
from gpuledger.services.runtime.gateway import server as http_server
from gpuledger.services.runtime.gateway_tokens import Tokens, add_token
from tests.integration.cluster import EXAMPLES, Processes, cli
from tests.integration.test_security import CONFIG, stored
from tests.services.given import submitted
from tests.waiting import eventually_async

pytestmark = pytest.mark.integration
THREE = EXAMPLES / "three-jobs.yaml"
JOB = "id: {id}\ntenant: {tenant}\ngpus: {gpus}\nduration: 3600\n"


@contextlib.asynccontextmanager
async def serving(server, tmp_path):
    """(base URL, {tenant or user: token}): a real gateway on a free loopback port, connected
    as the `gateway` identity, with tokens of team-a, team-b and team-a's alice and bob."""
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
    try:
        yield f"http://127.0.0.1:{port}", tokens
    finally:
        srv.should_exit = True
        await asyncio.wait_for(task, 10)


@pytest.fixture
async def gateway(server, admission, tmp_path):
    """(base URL, {tenant: token}): the gateway on a free loopback port."""
    async with serving(server, tmp_path) as served:
        yield served


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


# ---------------------------------------------------------------- job verbs (issue 42, 43)


@pytest.fixture
async def cluster(server, bus, tmp_path):
    """(base URL, tokens): the gateway over the whole control plane and a simulated agent of
    node-1 (4 GPUs), each its own process and identity, configured for team-a and team-b."""
    await publish_config(server.access(), CONFIG)
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    procs = Processes(server, tmp_path / "config.yaml", tmp_path)
    procs.start_all(["node-1"])
    try:
        async with serving(server, tmp_path) as served:
            yield served
    finally:
        procs.stop()


async def folded(http: httpx.AsyncClient, headers, job: str, until) -> dict:
    """The job's status (the admission service's fold) once `until` holds for it."""

    async def check():
        st = (await http.get(f"/v1/tenants/team-a/jobs/{job}", headers=headers)).json()
        return st if until(st) else None

    return await eventually_async(check, what=f"{job}'s status to change")


async def ctl_seq(bus: Bus, job: str) -> int:
    """The sequence of the last job control event of team-a's `job` in the log (0: none)."""
    last = await bus.last_message(f"gl.ctl.team-a.{job}.>")
    return 0 if last is None else last.seq


async def requeued_and_running(bus: Bus, job: str) -> bool:
    """Whether the log, folded, has team-a's `job` running again after a requeue."""
    ledger, _ = await live_player.fold(bus)
    rec = ledger.jobs.get(job)
    return rec is not None and rec.state == "running" and len(rec.preemptions) == 1


async def test_a_tenants_token_holds_releases_reprioritises_tops_and_requeues_its_own_jobs(
    cluster, server, bus, tmp_path
):
    url, tokens = cluster
    a, b = auth(tokens["team-a"]), auth(tokens["team-b"])
    jobs = "/v1/tenants/team-a/jobs"
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        # given team-a's `run` placed (1 of node-1's 4 GPUs); `wide`, `first` and `next`
        # pending (4 GPUs each), in that order
        for job, gpus in (("run", 1), ("wide", 4), ("first", 4), ("next", 4)):
            spec = {"id": job, "tenant": "team-a", "gpus": gpus, "duration": "1h"}
            r = await http.post(
                f"{jobs}?wait=true", headers=a, json={**spec, "checkpoint": {"save": "1s"}}
            )
            assert r.status_code == 200, r.text
        await folded(http, a, "run", lambda s: s["state"] == "running")

        # when team-a holds `wide`, then it is held by its tenant
        r = await http.post(f"{jobs}/wide/hold", headers=a, json={"reason": "no data yet"})
        assert r.status_code == 202 and r.json()["state"] == "requested", r.text
        st = await folded(http, a, "wide", lambda s: s.get("held_by") == "tenant")
        assert (st["state"], st["reason"]) == ("pending", "Held")
        # and a second hold is refused at once with the CLI's reason, nothing published
        seq = await ctl_seq(bus, "wide")
        again = await http.post(f"{jobs}/wide/hold", headers=a)
        assert (again.status_code, again.json()["reason"]) == (422, "InvalidSpec")
        assert again.json()["message"] == "'wide' is already held by tenant (InvalidSpec)"

        # when team-b's token releases team-a's job: the answer for an id nobody has
        theirs = await http.post("/v1/tenants/team-b/jobs/wide/release", headers=b)
        nobody = await http.post("/v1/tenants/team-b/jobs/nobody/release", headers=b)
        assert (theirs.status_code, theirs.json()["reason"]) == (404, "UnknownJob")
        assert theirs.text.replace("wide", "J") == nobody.text.replace("nobody", "J")
        # and in team-a's path its token is another tenant's: 403
        assert (await http.post(f"{jobs}/wide/release", headers=b)).status_code == 403
        assert await ctl_seq(bus, "wide") == seq and not await stored(bus, "gl.ctl.team-b.>")

        # when team-a releases `wide` and lowers it by 10, then its priority is 50 - 10
        r = await http.post(f"{jobs}/wide/release", headers=a)
        assert r.status_code == 202, r.text
        r = await http.patch(f"{jobs}/wide", headers=a, json={"nice": 10, "reason": "later"})
        assert r.status_code == 202, r.text
        st = await folded(http, a, "wide", lambda s: s["priority"] == 40)
        assert st.get("held_by") is None and st["state"] == "pending"
        # raising it above its class's 50 stays the operator's: the CLI's reason, nothing sent
        seq = await ctl_seq(bus, "wide")
        up = await http.patch(f"{jobs}/wide", headers=a, json={"priority": 60})
        assert (up.status_code, up.json()["reason"]) == (422, "InvalidSpec")
        assert (
            up.json()["message"]
            == "raising 'wide' above its class's 50 needs the operator (InvalidSpec)"
        )
        # bad input: one line, 400, nothing published
        for body, line in (
            ('{"priority": 2000000}', "body: priority 2000000: out of range (0 to 1000000)"),
            ('{"prio": 1}', "body: unknown field 'prio' (expected class, nice, priority, reason)"),
            ('{"nice": 1, "class": "build"}', "body: give exactly one of priority, nice and class"),
            ('{"priority": true}', "body: priority: expected an integer"),
            ("{}", "body: give exactly one of priority, nice and class"),
        ):
            bad = await http.patch(f"{jobs}/wide", headers=a, content=body)
            assert (bad.status_code, bad.json()) == (
                400,
                {"reason": "InvalidRequest", "message": line},
            ), body
        broken = await http.patch(f"{jobs}/wide", headers=a, content='{"nice": ')
        assert broken.status_code == 400 and broken.json()["reason"] == "InvalidRequest"
        assert broken.json()["message"].startswith("body: ") and "\n" not in broken.text
        unknown = await http.post(f"{jobs}/wide/hold", headers=a, json={"nice": 1})
        assert unknown.status_code == 400, unknown.text
        assert await ctl_seq(bus, "wide") == seq

        # what cannot apply: the CLI's reasons, 422
        for path, line in (
            ("wide/requeue", "'wide' is pending: only a running job can be requeued"),
            ("run/top", "'run' is running: only a pending job can be moved to the top"),
            ("run/hold", "'run' is running: only a job not yet placed can be held"),
        ):
            r = await http.post(f"{jobs}/{path}", headers=a)
            assert (r.status_code, r.json()["message"]) == (422, f"{line} (InvalidSpec)"), path

        # when team-a requeues `run`, then it checkpoints, leaves its GPU and is placed again
        r = await http.post(f"{jobs}/run/requeue", headers=a, json={"reason": "ECC errors"})
        assert r.status_code == 202, r.text
        await eventually_async(lambda: requeued_and_running(bus, "run"), what="run requeued")

        # when team-a moves `next` to the top of its queue, then `next`, not `first` (queued
        # before it), takes node-1 once `run` is cancelled
        r = await http.post(f"{jobs}/next/top", headers=a)
        assert r.status_code == 202, r.text
        assert (await http.delete(f"{jobs}/run", headers=a)).status_code == 202
        await folded(http, a, "next", lambda s: s["state"] == "running")

    # and the projection of the log says so (the CLI's SQL)
    data = tmp_path / "data"
    built = cli(
        "project", "--rebuild", "--nats-url", server.url, "--no-follow", "--data", str(data)
    )
    assert built.returncode == 0, built.stderr
    query = (
        "select j.job_id, j.state, j.reason is not distinct from 'Held' as held, j.priority, "
        "j.preemptions, count(t.seq) filter "
        "(t.from_state = 'running' and t.to_state = 'pending' and t.reason = 'Requeue') "
        "as requeued from jobs j left join job_transitions t using (job_id) "
        "group by all order by 1"
    )
    out = cli("sql", query, "-o", "json", "--data", str(data))
    assert out.returncode == 0, out.stderr
    rows = {r.pop("job_id"): r for r in json.loads(out.stdout)}
    assert rows == {
        "first": {
            "state": "pending",
            "held": False,
            "priority": 50,
            "preemptions": 0,
            "requeued": 0,
        },
        "next": {
            "state": "running",
            "held": False,
            "priority": 50,
            "preemptions": 0,
            "requeued": 0,
        },
        "run": {
            "state": "cancelled",
            "held": False,
            "priority": 50,
            "preemptions": 1,
            "requeued": 1,
        },
        "wide": {
            "state": "pending",
            "held": False,
            "priority": 40,
            "preemptions": 0,
            "requeued": 0,
        },
    }


async def test_a_users_token_acts_on_its_users_jobs_only(gateway, server, bus):
    url, tokens = gateway
    alice, bob = auth(tokens["alice"]), auth(tokens["bob"])
    jobs = "/v1/tenants/team-a/jobs"
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        # given bob's `u-b` and alice's `u-a`, each posted with its user's token, admitted
        for who, job in ((bob, "u-b"), (alice, "u-a")):
            r = await http.post(
                f"{jobs}?wait=true",
                headers=who,
                content=JOB.format(id=job, tenant="team-a", gpus=1),
            )
            assert r.status_code == 200, r.text

        # when alice's token holds or reprioritises bob's job: 404 UnknownJob, the answer to
        # an id nobody has (as for cancel, and as the intake answers her key), nothing sent
        for method, path, body in (
            (http.post, "u-b/hold", None),
            (http.patch, "u-b", {"nice": 5}),
        ):
            r = await method(f"{jobs}/{path}", headers=alice, json=body)
            nobody = await method(
                f"{jobs}/{path.replace('u-b', 'u-none')}", headers=alice, json=body
            )
            assert (r.status_code, r.json()["reason"]) == (404, "UnknownJob"), path
            assert r.text.replace("u-b", "J") == nobody.text.replace("u-none", "J"), path
        assert not await stored(bus, "gl.ctl.team-a.u-b.>")
        # and a job only team-b has is, to alice, an id nobody has
        r = await http.post(
            "/v1/tenants/team-b/jobs?wait=true",
            headers=auth(tokens["team-b"]),
            content=JOB.format(id="u-t", tenant="team-b", gpus=1),
        )
        assert r.status_code == 422, r.text  # team-b is not configured: rejected, but its id
        theirs = await http.post(f"{jobs}/u-t/hold", headers=alice)
        nobody = await http.post(f"{jobs}/u-none/hold", headers=alice)
        assert (theirs.status_code, theirs.json()["reason"]) == (404, "UnknownJob")
        assert theirs.text.replace("u-t", "J") == nobody.text.replace("u-none", "J")
        assert not await stored(bus, "gl.ctl.*.u-t.>")

        # when alice holds her own job and lowers it, and bob holds his
        r = await http.post(f"{jobs}/u-a/hold", headers=alice, json={"reason": "waiting"})
        assert r.status_code == 202 and r.json()["state"] == "requested", r.text
        r = await http.patch(f"{jobs}/u-a", headers=alice, json={"nice": 5})
        assert r.status_code == 202, r.text
        r = await http.post(f"{jobs}/u-b/hold", headers=bob)
        assert r.status_code == 202, r.text
        await folded(http, bob, "u-b", lambda s: s.get("held_by") == "tenant")
        await folded(http, alice, "u-a", lambda s: s["priority"] == 45)

    # then the admission service's fold holds both, as `gpuledger status` shows
    for job, priority in (("u-a", 45), ("u-b", 50)):
        out = cli("status", job, "--tenant", "team-a", "-o", "json", "--nats-url", server.url)
        assert out.returncode == 0, out.stderr
        st = json.loads(out.stdout)
        assert (st["state"], st["held_by"], st["priority"]) == ("pending", "tenant", priority)


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
    # a user of a tenant the file does not hold is refused, one line, nothing written
    before = path.read_text()
    stray = cli("gateway", "token", "nowhere", "alice", "--tokens", str(path))
    assert stray.returncode == 2 and path.read_text() == before
    assert stray.stderr.strip() == (
        f"error: {path}: unknown tenant 'nowhere' for user 'alice' (add the tenant first: "
        f"gpuledger gateway token nowhere --tokens {path})"
    )
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
