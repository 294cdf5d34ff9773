"""Stage `user_limits`: given a tenant whose users may each run 2 jobs and hold 4 GPUs
(`users: {default: {running_jobs: 2, gpus: 4}, overrides: {carol: {gpus: 8}}}`), when one
user's sweep is tried, then her jobs beyond a limit wait with `UserLimit` (naming the user,
the limit and her use), while a colleague's single job is placed, jobs naming no user are
not bound, and an override raises the limit for its user only. Per GPU model
(`gpus_by_model: {H100-80GB: 2}`), a user at a model's bound has that model closed: a job that
may use another goes there, one that may not waits with `UserLimit` naming the model."""

import dataclasses

import pytest

from gpuledger import events as ev
from gpuledger.events.reasons import PendingReason
from gpuledger.services.domain.inputs.configfile import config_events
from gpuledger.services.scheduler.round import Limits
from gpuledger.services.scheduler.stages import user_limits
from tests.scheduler.stages.helpers import round_at
from tests.services.test_pending import N8, fleet, scheduled, why

TEAM = {
    "name": "a",
    "guaranteed": 8,
    "users": {"default": {"running_jobs": 2, "gpus": 4}, "overrides": {"carol": {"gpus": 8}}},
}


def sweep(user, n, gpus=1, prefix="s"):
    return [{"id": f"{prefix}{i}", "tenant": "a", "user": user, "gpus": gpus} for i in range(n)]


def placed(out):
    return sorted(e.job_id for e in out if isinstance(e, ev.GangPlaced))


def test_a_users_sweep_stops_at_her_running_jobs_and_a_colleagues_job_runs():
    # given alice's 4-job sweep submitted before bob's single job
    _, out = scheduled(fleet(N8, tenants=[TEAM]), sweep("alice", 4) + sweep("bob", 1, prefix="b"))
    # then 2 of alice's jobs run, bob's runs, and alice's others wait with UserLimit
    assert placed(out) == ["b0", "s0", "s1"]
    e = why(out, "s2")
    assert e.reason == PendingReason.UserLimit
    assert e.message == "user alice of tenant a runs 2 jobs; at most 2 at once (running_jobs)"
    assert e.details["user"] == "alice" and e.details["running_jobs"] == 2


def test_the_gpu_limit_counts_the_jobs_gpus_and_an_override_raises_it():
    # given alice (default: 4 GPUs) and carol (override: 8 GPUs), each asking 3 + 3 GPUs
    _, out = scheduled(
        fleet({"name": "n1", "gpus": 16}, tenants=[{**TEAM, "guaranteed": 16}]),
        sweep("alice", 2, gpus=3) + sweep("carol", 2, gpus=3, prefix="c"),
    )
    # then alice's second job would hold 6 > 4 GPUs: it waits; carol runs both (6 <= 8)
    assert placed(out) == ["c0", "c1", "s0"]
    e = why(out, "s1")
    assert e.message == (
        "user alice of tenant a holds 3 GPUs and this job needs 3; at most 4 at once (gpus)"
    )


def test_jobs_naming_no_user_and_tenants_without_user_limits_are_not_bound():
    anonymous = [{"id": f"j{i}", "tenant": "a", "gpus": 1} for i in range(4)]
    _, out = scheduled(fleet(N8, tenants=[TEAM]), anonymous)
    assert placed(out) == ["j0", "j1", "j2", "j3"]
    _, out = scheduled(fleet(N8), sweep("alice", 4))
    assert placed(out) == ["s0", "s1", "s2", "s3"]


def test_running_jobs_fold_into_the_users_use_and_bookkeeping_adds_a_bind():
    # given alice's 2 jobs placed and folded
    ledger, _ = scheduled(fleet(N8, tenants=[TEAM]), sweep("alice", 3))
    rnd = round_at(ledger, 5)
    assert rnd.user_in_use("a", "alice") == [2, 2000]
    # then her third job is kept out without a new event (its reason is already UserLimit)
    assert user_limits.gate(rnd, ledger.jobs["s2"], Limits(need=1000)) == []
    # and a bind of bob's job in this decide counts towards his use
    ledger2, _ = scheduled(fleet(N8, tenants=[TEAM]), sweep("bob", 1, prefix="b"))
    rnd2 = round_at(ledger2, 5)
    unplaced = dataclasses.replace(ledger2.jobs["b0"], allocation_id=None)  # as when bound
    user_limits.book(rnd2, unplaced, ((),))
    assert rnd2.user_in_use("a", "bob") == [2, 2000]


@pytest.mark.parametrize(
    ("users", "problem"),
    [
        ({"default": {"gpus": -1}}, "tenants[0].users.default.gpus"),
        ({"default": {"running_jobs": -2}}, "tenants[0].users.default.running_jobs"),
        ({"overrides": {"a.b": {"gpus": 1}}}, "tenants[0].users.overrides: invalid user 'a.b'"),
    ],
)
def test_a_negative_limit_or_a_bad_user_name_is_a_configuration_error(users, problem):
    from gpuledger.services.domain.inputs.schema import InputError

    with pytest.raises(InputError) as info:
        config_events({"tenants": [{"name": "a", "users": users}]})
    assert any(p.startswith(problem) for p in info.value.problems), info.value.problems


MODELS = (
    {"name": "h100", "gpus": 8, "model": "H100-80GB"},
    {"name": "a100", "gpus": 8, "model": "A100-80GB"},
)
H100_TEAM = {
    "name": "a",
    "guaranteed": 16,
    "users": {
        "default": {"gpus_by_model": {"H100-80GB": 2}},
        "overrides": {"carol": {"gpus_by_model": {"H100-80GB": 4}}},
    },
}


def test_a_user_at_a_models_bound_has_that_model_closed_and_runs_elsewhere():
    # given alice holds 2 H100 GPUs, her bound for that model (the default's)
    h100 = ["H100-80GB"]
    ledger, _ = scheduled(
        fleet(*MODELS, tenants=[H100_TEAM]),
        [{"id": "own", "tenant": "a", "user": "alice", "gpus": 2, "models": h100}],
    )
    assert ledger.user_by_model == {("a", "alice", "H100-80GB"): 2000}
    rnd = round_at(ledger, 5)
    lim = Limits(need=1000)
    # when she asks 1 more H100 GPU, then the H100 node is closed to her
    more = {"id": "more", "tenant": "a", "user": "alice", "gpus": 1, "models": h100}
    _, out = scheduled(
        fleet(*MODELS, tenants=[H100_TEAM]),
        [{"id": "own", "tenant": "a", "user": "alice", "gpus": 2, "models": h100}],
        [
            more,
            {"id": "any", "tenant": "a", "user": "alice", "gpus": 1},
            {"id": "c1", "tenant": "a", "user": "carol", "gpus": 4, "models": h100},
        ],
    )
    e = why(out, "more")
    assert e.reason == PendingReason.UserLimit
    assert e.message == (
        "user alice of tenant a holds 2 H100-80GB GPUs and this job needs 1; at most 2 at once "
        "(gpus_by_model)"
    )
    assert e.details["gpus_by_model"] == ["H100-80GB"]
    # and her job that may use any model goes to the A100s; carol's override lets her take 4
    by_job = {p.job_id: {m.node for m in p.members} for p in out if isinstance(p, ev.GangPlaced)}
    assert by_job == {"any": {"a100"}, "c1": {"h100"}}
    # and the stage's own answer: the node excluded, the smallest gang its cap
    fold_job = ledger.jobs["own"]
    assert user_limits.model_blocks(rnd, fold_job, 1000) == {
        "H100-80GB": (
            "user alice of tenant a holds 2 H100-80GB GPUs and this job needs 1; at most 2 at "
            "once (gpus_by_model)"
        )
    }
    assert user_limits.exclude(rnd, fold_job, lim) == {"h100"}
    assert user_limits.cap(rnd, fold_job, lim, 1) is True


def test_a_users_use_per_model_is_folded_and_freed_when_the_job_ends():
    # given alice's job holds 2 H100 GPUs, when it completes, then she holds none of them
    from tests.services.given import fold, stamped

    h100 = ["H100-80GB"]
    ledger, _ = scheduled(
        fleet(*MODELS, tenants=[H100_TEAM]),
        [{"id": "own", "tenant": "a", "user": "alice", "gpus": 2, "models": h100}],
    )
    assert ledger.user_by_model == {("a", "alice", "H100-80GB"): 2000}
    (alloc,) = ledger.active
    fold(ledger, [stamped(ev.GangCompleted, "d", 4, allocation_id=alloc, job_id="own")])
    assert ledger.user_by_model == {}


def test_a_negative_model_bound_is_a_configuration_error():
    from gpuledger.services.domain.inputs.schema import InputError

    users = {"default": {"gpus_by_model": {"H100-80GB": -1}}}
    with pytest.raises(InputError) as info:
        config_events({"tenants": [{"name": "a", "users": users}]})
    assert any(
        p.startswith("tenants[0].users.default.gpus_by_model") for p in info.value.problems
    ), info.value.problems
