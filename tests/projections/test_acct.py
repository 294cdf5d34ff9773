"""`gpuledger acct`: sacct-like accounting over a projected scenario."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuledger.projections.store import rebuild
from gpuledger.services.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module")
def data(tmp_path_factory, messages):
    d = tmp_path_factory.mktemp("acct")
    rebuild(messages, d / "projection.duckdb")
    return d


def acct(data, *args):
    return runner.invoke(app, ["acct", "--data", str(data), *args])


def test_default_table_has_sacct_columns_and_one_line_per_job(data):
    r = acct(data)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == [
        "JobID",
        "Account",
        "QOS",
        "State",
        "AllocGPUs",
        "Submit",
        "Start",
        "End",
        "Elapsed",
        "Planned",
    ]
    assert set(lines[1]) == {"-", " "}
    small = next(line for line in lines if line.split()[0] == "small-a").split()
    assert small == [
        "small-a",
        "org/a",
        "train",
        "COMPLETED",
        "0.50",
        "1970-01-01T00:00:10",
        "1970-01-01T00:00:12",
        "1970-01-01T00:11:00",
        "00:10:48",
        "00:00:02",
    ]


def test_parsable_fields_window_and_total_wait_after_requeue(data):
    r = acct(
        data,
        "-o",
        "jobid,state,planned,preemptions",
        "--parsable",
        "--starttime",
        "1970-01-01T00:10:30",
        "--tenant",
        "org/b",
    )
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [
        "JobID|State|Planned|Preemptions|",
        "train-b|PENDING|00:10:55|1|",  # 1 s before its first placement + 654 s after the requeue
        "big-b|PENDING|00:10:50|0|",
    ]
    r = acct(data, "-o", "JobID", "-P", "-n", "--endtime", "1970-01-01T00:00:05")
    assert r.output.split() == ["train-b"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "jobid,elapsd"], "error: -o: unknown field 'elapsd' (did you mean 'Elapsed'?)"),
        (["-S", "yesterday"], "error: --starttime: 'yesterday' is not a time"),
        (["-S", "1970-01-02", "-E", "1970-01-01"], "error: --endtime is before --starttime"),
    ],
)
def test_bad_options_get_one_line_and_exit_2(data, args, message):
    r = acct(data, *args)
    assert r.exit_code == 2
    assert r.output.startswith(message) and len(r.output.splitlines()) == 1
