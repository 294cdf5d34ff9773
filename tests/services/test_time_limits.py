"""Time limits, decider by decider: given a configuration and events, when admission, the
scheduler or an agent decides at `now`, then the limit is resolved, reached and enforced
(issue 31). The simulator runs of the same rules are in tests/replay/test_time_limit_scenarios.py."""

from __future__ import annotations

import msgspec
import pytest

from gpuledger import events as ev
from gpuledger.services.admission.decider import Admission
from gpuledger.services.domain.inputs.jobfile import JobFileError, job_spec
from gpuledger.services.node_agent.decider import AgentDecider, Checkpoint, Kill, Observed
from gpuledger.services.scheduler.decider import Scheduler
from tests.services.given import cluster, fold, given, of_type, stamped, submitted, submitted_json

CLASSES = [
    {"name": "capped", "value": 40, "default_time_limit": "2h", "max_time_limit": "1d"},
    {"name": "maxonly", "value": 40, "max_time_limit": "4h"},
]
FLEET = cluster(
    {"name": "n1", "gpus": 8, "model": "H100-80GB"},
    tenants=[{"name": "org/a", "guaranteed": 8}],
    classes=CLASSES,
    policy={"default_grace_s": 45},
)


def admit(*events):
    (out,) = Admission().decide(given(*FLEET, *events), now_ms=1000)
    return out


@pytest.mark.parametrize(
    "job, limit",
    [
        (dict(time_limit="90m"), 5400),  # its own
        (dict(**{"class": "capped"}), 7200),  # the class default
        (dict(**{"class": "capped"}, time_limit="1d"), 86400),  # up to the maximum
        (dict(**{"class": "maxonly"}), 14400),  # no default: the maximum
    ],
)
def test_admission_resolves_the_limit_a_job_runs_under(job, limit):
    out = admit(submitted(id="j", tenant="org/a", gpus=1, **job))
    assert isinstance(out, ev.JobAdmitted) and out.time_limit_s == limit


def test_a_job_without_any_limit_is_admitted_as_before_the_field_existed():
    out = admit(submitted(id="j", tenant="org/a", gpus=1))
    assert out.time_limit_s is msgspec.UNSET
    assert b"time_limit_s" not in ev.encode(out)
    assert b"time_limit_s" not in ev.encode(submitted(id="j", tenant="org/a", gpus=1))


def test_a_limit_above_the_class_maximum_is_rejected_naming_both():
    out = admit(submitted(id="j", tenant="org/a", gpus=1, time_limit="2d", **{"class": "capped"}))
    assert isinstance(out, ev.JobRejected) and out.reason == "TimeLimitTooLong"
    assert out.message == (
        "time_limit_s: 2d is longer than class 'capped' allows (max_time_limit_s 1d)"
    )
    assert out.details == {"time_limit_s": 172800, "max_time_limit_s": 86400}


@pytest.mark.parametrize(
    "spec, needle",
    [
        (dict(time_limit_s=0), "must be > 0"),
        (dict(time_limit_s=-5), "must be > 0"),
        (dict(time_limit_s=60, kind="service"), "a service runs until it is scaled down"),
    ],
)
def test_a_malformed_limit_from_ci_json_is_rejected_as_invalid(spec, needle):
    out = admit(submitted_json(job_id="j", tenant="org/a", resources={"gpus": 1}, **spec))
    assert isinstance(out, ev.JobRejected) and out.reason == "InvalidSpec"
    assert needle in out.message


@pytest.mark.parametrize(
    "doc, problem",
    [
        (dict(time_limit="soon"), "time_limit"),
        (dict(time_limit_s=0), "time_limit_s"),
        (dict(time_limit="0s"), "time_limit: must be > 0"),
        (dict(time_limit="1h", time_limit_s=3600), "give either 'time_limit' or 'time_limit_s'"),
    ],
)
def test_job_files_refuse_bad_limits_with_one_line_each(doc, problem):
    with pytest.raises(JobFileError) as info:
        job_spec({"id": "j", "tenant": "org/a", **doc})
    assert len(info.value.problems) == 1 and problem in info.value.problems[0]


def running(limit="30m"):
    """j1 (1 GPU, `limit`) admitted, placed on n1 at 1 s, started at 2 s: (ledger, its log)."""
    log = [*FLEET, submitted(id="j1", tenant="org/a", gpus=1, time_limit=limit)]
    ledger = given(*log)
    for decide in (Admission().decide, Scheduler().decide):
        out = decide(ledger, 1000)
        fold(ledger, out)
        log += out
    start = stamped(
        ev.MemberStarted, "j1#1/0", 2000, job_id="j1", allocation_id="j1#1", rank=0, node="n1"
    )
    fold(ledger, [start])
    return ledger, [*log, start]


def test_the_scheduler_reaches_the_limit_at_start_plus_limit_and_not_before():
    ledger, _ = running()
    sched = Scheduler()
    assert sched.next_wakeup_ms(ledger, 2000) == 2000 + 1_800_000
    assert of_type(sched.decide(ledger, 1_801_999), ev.TimeLimitReached) == []
    (reached,) = sched.decide(ledger, 1_802_000)
    assert isinstance(reached, ev.TimeLimitReached)
    assert (reached.allocation_id, reached.time_limit_s, reached.started_ms) == ("j1#1", 1800, 2000)
    assert reached.deadline_ms == 1_802_000 + 45_000  # the policy's grace
    fold(ledger, [reached])
    assert sched.decide(ledger, 1_803_000) == []  # decided once: nothing until members exit


def test_the_agent_asks_for_a_checkpoint_then_kills_at_the_deadline():
    ledger, log = running()
    reached = Scheduler().decide(ledger, 1_802_000)
    core = AgentDecider("n1")
    state = core.initial_state()
    for seq, e in enumerate([*log, *reached], 1):
        state = core.evolve(state, seq, e)
    state.members[("j1#1", 0)] = Observed(started=True, running=True)
    assert core.plan(state, 1_802_000) == [Checkpoint("j1#1", 0)]
    state.members[("j1#1", 0)].checkpoint_requested = True
    assert core.plan(state, 1_846_999) == []
    assert core.plan(state, 1_847_000) == [Kill("j1#1", 0)]


def test_without_a_limit_reached_the_agent_never_stops_the_run():
    ledger, log = running()
    core = AgentDecider("n1")
    state = core.initial_state()
    for seq, e in enumerate(log, 1):
        state = core.evolve(state, seq, e)
    state.members[("j1#1", 0)] = Observed(started=True, running=True)
    assert core.plan(state, 10 * 3_600_000) == []  # the scheduler decides the limit, not a clock


def test_a_stopped_run_ends_timeout_unless_every_member_completed():
    for outcome, state, reason in (
        ("preempted", "timeout", "TimeLimit"),
        ("completed", "completed", None),
    ):
        ledger, _ = running()
        fold(ledger, Scheduler().decide(ledger, 1_802_000))
        exited = stamped(
            ev.MemberExited,
            "j1#1/0",
            1_810_000,
            job_id="j1",
            allocation_id="j1#1",
            rank=0,
            node="n1",
            outcome=outcome,
        )
        fold(ledger, [exited])
        fold(ledger, Scheduler().decide(ledger, 1_810_000))
        job = ledger.jobs["j1"]
        assert (str(job.state), job.reason) == (state, reason)
        assert ledger.allocations["j1#1"].ended and not ledger.active


def test_check_refuses_a_limit_above_the_class_maximum_in_one_line(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from gpuledger.services.cli.main import app

    config = tmp_path / "cluster.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "cluster": {"nodes": [{"name": "n1", "gpus": 8, "model": "H100-80GB"}]},
                "tenants": [{"name": "org/a", "guaranteed": 8}],
                "priority_classes": CLASSES,
            }
        )
    )
    runner = CliRunner()
    results = {}
    for name, limit in (("ok", "12h"), ("long", "2d"), ("bad", "soon")):
        path = tmp_path / f"{name}.yaml"
        job = {"id": name, "tenant": "org/a", "class": "capped", "gpus": 1, "time_limit": limit}
        path.write_text(yaml.safe_dump(job))
        results[name] = (path, runner.invoke(app, ["check", str(config), str(path)]))
    path, ok = results["ok"]
    assert ok.exit_code == 0 and ok.stdout.splitlines()[-1] == f"ok {path} (job)"
    path, long = results["long"]
    assert long.exit_code == 2
    assert long.stderr.strip() == (
        f"error: {path}: TimeLimitTooLong: time_limit_s: 2d is longer than class 'capped' "
        "allows (max_time_limit_s 1d)"
    )
    path, bad = results["bad"]
    assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert bad.stderr.startswith(f"error: {path}: time_limit") and "Traceback" not in bad.output


def test_the_http_gateway_takes_the_job_file_spelling():
    from gpuledger.services.runtime.gateway import job_event

    event = job_event({"id": "j", "tenant": "org/a", "gpus": 1, "time_limit": "2h"}, "org/a")
    assert event.job.time_limit_s == 7200
