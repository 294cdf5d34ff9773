"""`gpuledger report` (sreport-like) over the projection of a simulated run
(examples/users-report.yaml: 12 GPUs for 5 h, h100-1 lost at 1 h; alice, bob and carol
inside two tenants, and a job naming no user)."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict

import duckdb
import pytest
from typer.testing import CliRunner

from gpuledger.projections.store import rebuild
from gpuledger.replay.scenario import load
from gpuledger.replay.simulator import simulate
from tests.projections.audit_cli import EXAMPLES

runner = CliRunner()
H = 3_600_000  # ms per hour


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    rebuild(simulate(load(EXAMPLES / "users-report.yaml")).log, d / "projection.duckdb")
    return d


def gl(data, *args):
    from gpuledger.services.cli.main import app

    return runner.invoke(app, [*args, "--data", str(data)])


def report(data, *args) -> dict:
    r = gl(data, "report", "-o", "json", *args)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_the_whole_run_splits_into_allocated_idle_and_down(data):
    # given the simulated run, when reported over the whole log
    doc = report(data)
    # then 12 GPUs x 5 h are reported: 18.5 allocated, 16 down (h100-1's 4 GPUs for 4 h),
    # the rest idle; planned down and reserved are 0
    u = {c: v["gpu_hours"] for c, v in doc["utilisation"].items()}
    assert doc["reported_gpu_hours"] == pytest.approx(60.0)
    assert u == pytest.approx(
        {"allocated": 18.5, "idle": 25.5, "down": 16.0, "planned_down": 0.0, "reserved": 0.0}
    )
    assert sum(u.values()) == pytest.approx(doc["reported_gpu_hours"])
    assert doc["utilisation"]["down"]["pct"] == pytest.approx(100 * 16 / 60)
    assert (doc["start"], doc["end"]) == ("1970-01-01T00:00:00+00:00", "1970-01-01T05:00:00+00:00")


def test_top_tenants_and_users_and_the_job_without_a_user(data):
    doc = report(data)
    assert [(r["tenant"], r["gpu_hours"]) for r in doc["tenants"]] == [
        ("research", pytest.approx(10.0)),
        ("prod", pytest.approx(8.5)),
    ]
    users = {(r["tenant"], r["user"]): r["gpu_hours"] for r in doc["users"]}
    # carol's test ran 1 h on the lost node and again 3 h after its requeue
    assert users == pytest.approx(
        {
            ("research", "alice"): 8.0,
            ("prod", "carol"): 8.0,
            ("research", "bob"): 2.0,
            ("prod", "-"): 0.5,
        }
    )
    assert [r["user"] for r in report(data, "--top", "2")["users"]] == ["carol", "alice"]


def test_by_gpu_model(data):
    models = {r["model"]: r for r in report(data)["models"]}
    h100, a100 = models["H100-80GB"], models["A100-80GB"]
    assert (h100["reported_gpu_hours"], h100["allocated_gpu_hours"]) == (40.0, 16.0)
    assert (h100["down_gpu_hours"], h100["idle_gpu_hours"]) == (16.0, 8.0)
    assert (a100["allocated_gpu_hours"], a100["idle_gpu_hours"]) == (2.5, 17.5)


def test_a_window_is_clipped_and_read_in_its_zone(data):
    # when the second hour is asked for in Paris time (UTC+1 in 1970)
    doc = report(
        data, "--start", "1970-01-01T02:00", "--end", "1970-01-01T03:00", "--tz", "Europe/Paris"
    )
    # then it is 01:00-02:00 UTC: train on h100-0 (4), a100-0 idle (4), h100-1 down (4)
    assert (doc["start_ms"], doc["end_ms"]) == (1 * H, 2 * H)
    assert doc["start"] == "1970-01-01T02:00:00+01:00"
    u = {c: v["gpu_hours"] for c, v in doc["utilisation"].items()}
    assert (u["allocated"], u["idle"], u["down"]) == pytest.approx((4.0, 4.0, 4.0))
    assert report(data, "--start", "1970-01-01T01:00:00Z", "--end", str(2 * H))["end_ms"] == 2 * H


def test_per_tenant_and_user_hours_agree_with_acct_summed_over_the_same_jobs(data):
    # given acct's GPU-hours of every job
    r = gl(data, "acct", "-P", "-n", "-o", "JobID,Account,User,GPUHours")
    assert r.exit_code == 0, r.output
    by_tenant: dict[str, float] = defaultdict(float)
    by_user: dict[tuple[str, str], float] = defaultdict(float)
    for line in r.output.splitlines():
        _job, tenant, user, hours = line.split("|")
        by_tenant[tenant] += float(hours)
        by_user[(tenant, user)] += float(hours)
    # when the report covers the whole log, then its numbers are those sums
    doc = report(data)
    assert {t["tenant"]: t["gpu_hours"] for t in doc["tenants"]} == pytest.approx(by_tenant)
    assert {(u["tenant"], u["user"]): u["gpu_hours"] for u in doc["users"]} == pytest.approx(
        {k: v for k, v in by_user.items() if v}
    )
    assert doc["utilisation"]["allocated"]["gpu_hours"] == pytest.approx(sum(by_tenant.values()))


def test_the_sql_views_hold_the_same_numbers(data):
    doc = report(data)
    con = duckdb.connect(str(data / "projection.duckdb"), read_only=True)
    try:
        (alloc, down, total) = con.execute(
            "SELECT allocated_gpu_hours, down_gpu_hours, reported_gpu_hours FROM report_utilisation"
        ).fetchone()
        users = con.execute("SELECT tenant, user, gpu_hours FROM report_users").fetchall()
        window = con.execute(
            "SELECT allocated_gpu_hours FROM utilisation_between(?, ?)", [H, 2 * H]
        ).fetchone()[0]
    finally:
        con.close()
    assert (alloc, down, total) == pytest.approx(
        (doc["utilisation"]["allocated"]["gpu_hours"], 16.0, doc["reported_gpu_hours"])
    )
    assert [(t, u, h) for t, u, h in users] == [
        (r["tenant"], r["user"], r["gpu_hours"]) for r in doc["users"]
    ]
    assert window == pytest.approx(4.0)


def test_csv_and_table_forms(data):
    r = gl(data, "report", "-o", "csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.output)))
    down = next(x for x in rows if x["section"] == "utilisation" and x["category"] == "down")
    assert float(down["gpu_hours"]) == 16.0
    assert {x["user"] for x in rows if x["section"] == "user"} == {"alice", "bob", "carol", "-"}
    text = gl(data, "report").output
    assert "60.00 GPU-hours reported" in text
    assert any(line.split() == ["down", "16.00", "26.67%"] for line in text.splitlines())
    assert any(line.split() == ["prod", "-", "1", "0.50", "0.83%"] for line in text.splitlines())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--start", "yesterday"], "error: --start: 'yesterday' is not a time"),
        (["--tz", "Mars/Base"], "error: --tz: unknown time zone 'Mars/Base'"),
        (
            ["--start", "1970-01-01T02:00", "--end", "1970-01-01T01:00"],
            "error: --end is not after --start",
        ),
    ],
)
def test_bad_options_get_one_line_and_exit_2(data, args, message):
    r = gl(data, "report", *args)
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[0].startswith(message)
    assert len(r.output.strip().splitlines()) == 1


def test_jobs_wide_and_why_show_the_user(data):
    lines = gl(data, "jobs", "-o", "wide").output.splitlines()
    at = lines[0].index("USER")  # (columns are aligned; the empty REASON has no word)
    user = {line.split()[0]: line[at:].split()[0] for line in lines[1:]}
    assert user == {"train": "alice", "eval": "bob", "svc-test": "carol", "legacy": "-"}
    r = gl(data, "why", "train")
    assert "(tenant research, user alice, class train" in r.output
    assert json.loads(gl(data, "why", "legacy", "-o", "json").output)["user"] == "-"
