"""`gpuledger users` and `gpuledger jobs --user` read the projection of a simulated run
(examples/submit-limits.yaml stopped at 10 minutes, while the admitted jobs run): each
tenant's and user's use against the limits in force, resolved by the rule admission and the
scheduler apply; and the jobs of one user."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gpuledger.projections.store import connect_readonly, rebuild
from gpuledger.projections.users import users_rows
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from tests.projections.audit_cli import EXAMPLES

runner = CliRunner()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("users")
    run = simulate(load(EXAMPLES / "submit-limits.yaml"), until_ms=600_000)
    rebuild(run.log, d / "projection.duckdb")
    return d


def gl(data, *args):
    from gpuledger.services.cli.main import app

    return runner.invoke(app, [*args, "--data", str(data)])


def test_each_user_and_the_tenant_show_their_use_against_their_limits(data):
    # given alice's three jobs and bob's one running, the rest refused
    con = connect_readonly(data / "projection.duckdb")
    try:
        rows = {r["user"]: r for r in users_rows(con)}
    finally:
        con.close()
    # then the tenant's line holds its totals against its own bounds
    t = rows["*"]
    assert (t["running_jobs"], t["pending_jobs"], t["gpus"]) == (4, 0, 4.0)
    assert (t["submit_jobs"], t["submit_jobs_limit"], t["array_size_limit"]) == (4, 6, 8)
    # and each user's against the default, alice's override applied key by key
    a, b = rows["alice"], rows["bob"]
    assert (a["submit_jobs"], a["submit_jobs_limit"], a["gpus"], a["gpus_limit"]) == (3, 3, 3, 4)
    assert (b["submit_jobs"], b["submit_jobs_limit"], b["gpus"], b["gpus_limit"]) == (1, 2, 1, 4)


def test_the_table_shows_used_over_limit_and_filters_by_tenant(data):
    r = gl(data, "users", "--tenant", "research")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [
        "TENANT     USER    RUNNING   GPUS   PENDING   SUBMITTED   ARRAY-SIZE",
        "research   *       4         4      0         4/6         8",
        "research   alice   3         3/4    0         3/3         -",
        "research   bob     1         1/4    0         1/2         -",
    ]
    assert gl(data, "users", "--tenant", "nobody").output.splitlines()[1:] == []


def test_jobs_lists_one_users_jobs(data):
    r = gl(data, "jobs", "--user", "bob", "-o", "json")
    assert r.exit_code == 0, r.output
    assert [(j["job_id"], j["state"]) for j in json.loads(r.output)] == [
        ("b1", "running"),
        ("sweep", "rejected"),
        ("pair", "rejected"),
    ]


def test_the_exporter_serves_the_same_use_and_limits_as_metrics(data):
    # given the same projection, when the aggregate exporter reads it
    from prometheus_client import CollectorRegistry, generate_latest

    from gpuledger.projections.exporter import ProjectionCollector

    registry = CollectorRegistry()
    registry.register(ProjectionCollector(data / "projection.duckdb"))
    text = generate_latest(registry).decode()
    # then each user's use and each bound in force are samples, as `users` shows them
    for line in (
        'gpuledger_user_running_jobs{tenant="research",user="alice"} 3.0',
        'gpuledger_user_gpus{tenant="research",user="bob"} 1.0',
        'gpuledger_user_pending_jobs{tenant="research",user="*"} 0.0',
        'gpuledger_user_limit{limit="submit_jobs",tenant="research",user="alice"} 3.0',
        'gpuledger_user_limit{limit="gpus",tenant="research",user="bob"} 4.0',
        'gpuledger_user_limit{limit="array_size",tenant="research",user="*"} 8.0',
    ):
        assert line in text.splitlines(), line
    # and a bound not in force is no sample (bob has no running_jobs bound)
    assert 'gpuledger_user_limit{limit="running_jobs",tenant="research",user="bob"}' not in text


def test_with_the_log_each_user_shows_weight_and_decayed_usage(tmp_path):
    # given examples/fair-tree.yaml to 75 minutes (its last event: carol's job, at 70)
    from gpuledger.replay.logio import write_log

    run = simulate(load(EXAMPLES / "fair-tree.yaml"), until_ms=4_500_000)
    rebuild(run.log, tmp_path / "projection.duckdb")
    log = tmp_path / "ft.jsonl"
    write_log(log, run.log)
    # when `users --log` folds it
    out = gl(tmp_path, "users", "--log", str(log), "-o", "json")
    assert out.exit_code == 0, out.output
    rows = {r["user"]: r for r in json.loads(out.output)}
    # then each user's usage is the fold's, over its weight (alice weighs 2)
    ledger = run.ledger
    for user, w in (("alice", 2), ("bob", 1), ("carol", 1)):
        used = ledger.user_usage_at("research", user, 4_200_000) / 3_600_000_000
        assert rows[user]["weight"] == w
        assert rows[user]["usage_gpu_hours"] == round(used, 4)
        assert rows[user]["standing_gpu_hours"] == round(used / w, 4)
    assert rows["carol"]["usage_gpu_hours"] == 0 < rows["bob"]["standing_gpu_hours"]
    assert rows["bob"]["standing_gpu_hours"] < rows["alice"]["standing_gpu_hours"]


def test_a_log_that_cannot_be_read_is_one_line_and_exit_2(data, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    for log in (bad, tmp_path / "missing.jsonl"):
        out = gl(data, "users", "--log", str(log))
        assert out.exit_code == 2
        assert out.output.startswith("error: --log: ") and out.output.count("\n") == 1


def test_a_user_bound_per_gpu_model_shows_its_use_of_each_bound_model(tmp_path):
    # given research's users bound to 2 H100 GPUs each; alice runs 2 H100 GPUs and 1 A100,
    # and asks 1 more H100 GPU (which waits: UserLimit)
    from gpuledger.replay.scenario import from_document

    h100 = ["H100-80GB"]
    doc = {
        "name": "by-model",
        "cluster": {
            "nodes": [
                {"name": "h100-0", "gpus": 8, "model": "H100-80GB"},
                {"name": "a100-0", "gpus": 8, "model": "A100-80GB"},
            ]
        },
        "tenants": [
            {
                "name": "research",
                "guaranteed": 16,
                "users": {"default": {"gpus_by_model": {"H100-80GB": 2}}},
            }
        ],
        "timeline": [
            {
                "at": 0,
                "submit": {
                    "id": "h",
                    "tenant": "research",
                    "user": "alice",
                    "gpus": 2,
                    "models": h100,
                    "duration": "1h",
                },
            },
            {
                "at": 0,
                "submit": {
                    "id": "a",
                    "tenant": "research",
                    "user": "alice",
                    "gpus": 1,
                    "models": ["A100-80GB"],
                    "duration": "1h",
                },
            },
            {
                "at": 60,
                "submit": {
                    "id": "more",
                    "tenant": "research",
                    "user": "alice",
                    "gpus": 1,
                    "models": h100,
                    "duration": "1h",
                },
            },
        ],
    }
    run = simulate(from_document(doc), until_ms=600_000)
    rebuild(run.log, tmp_path / "projection.duckdb")
    # when the users are listed, then alice's line has her H100 use against its bound
    r = gl(tmp_path, "users")
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [
        "TENANT     USER    RUNNING   GPUS   PENDING   SUBMITTED   ARRAY-SIZE   GPUS-BY-MODEL",
        "research   *       2         3      1         3/20000     10000        -",
        "research   alice   2         3      1         3           -            H100-80GB 2/2",
    ]
    j = json.loads(gl(tmp_path, "users", "-o", "json").output)
    assert j[1]["gpus_by_model"] == {"H100-80GB": {"gpus": 2.0, "limit": 2.0}}
    assert "gpus_by_model" not in j[0]
    # and the waiting job says which bound keeps it
    why = gl(tmp_path, "why", "more")
    assert "UserLimit" in why.output and "(gpus_by_model)" in why.output
    # and the aggregate exporter serves the same use and bound per model
    from prometheus_client import CollectorRegistry, generate_latest

    from gpuledger.projections.exporter import ProjectionCollector

    registry = CollectorRegistry()
    registry.register(ProjectionCollector(tmp_path / "projection.duckdb"))
    text = generate_latest(registry).decode().splitlines()
    for line in (
        'gpuledger_user_model_gpus{model="H100-80GB",tenant="research",user="alice"} 2.0',
        'gpuledger_user_model_limit{model="H100-80GB",tenant="research",user="alice"} 2.0',
    ):
        assert line in text, line
