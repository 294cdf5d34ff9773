"""Fidelity: the baseline's gap to what happened, every time a history is replayed.

The history (tests/fixtures/slurm-fidelity) is constructed so that every number is known: one
8-GPU node, two pairs of jobs (a `normal` job taking the node, then a `high` job that Slurm
started at once by preempting it). The recorded configuration keeps gpuledger's protections
(minimum runtime 300 s, grace 30 s), so each `high` job waits until its victim has run 300 s,
plus the grace: 270 s and 240 s where Slurm had 0 s."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuledger.replay import observed as obs
from gpuledger.replay.fidelity import Gap
from gpuledger.replay.importers.slurm import import_slurm
from gpuledger.services.cli.main import app

runner = CliRunner()
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "slurm-fidelity"


@pytest.fixture
def history(tmp_path: Path) -> Path:
    """Given the constructed history (tests/fixtures/slurm-fidelity), imported: log +
    observation file."""
    log = tmp_path / "h.jsonl"
    import_slurm(
        FIXTURE / "sacct.txt", log, sinfo=FIXTURE / "sinfo.txt", mapping=FIXTURE / "mapping.yaml"
    )
    return log


def _metric(fid: dict, label: str) -> dict:
    return next(m for m in fid["metrics"] if m["metric"] == label)


def test_replay_reports_the_gap_of_every_metric_with_known_numbers(history, tmp_path):
    # when the history is replayed under its recorded configuration
    out = tmp_path / "r.json"
    r = runner.invoke(
        app, ["replay", str(history), "--out", str(tmp_path / "r.jsonl"), "--json", str(out)]
    )
    assert r.exit_code == 0, r.output
    fid = json.loads(out.read_text())["fidelity"]
    # then states match exactly
    for s in ("completed", "failed", "timeout", "cancelled", "never started"):
        assert _metric(fid, f"jobs {s}")["gap"] == 0 and _metric(fid, f"jobs {s}")["within"]
    # and both preempt each `normal` job once, but the baseline later: each victim runs 5 min
    # (lost, no checkpoint; Slurm's GraceTime 0, the importer's grace) where Slurm's ran 1 and
    # 1.5 min: 8 GPUs x 7.5 min more, outside 2 %
    pre = _metric(fid, "preemptions")
    assert (pre["observed"], pre["baseline"], pre["within"]) == (2, 2, True)
    gpu = _metric(fid, "GPU-hours")
    assert gpu["gap"] == pytest.approx(8 * 7.5 / 60) and gpu["within"] is False
    # and the high jobs waited 240 s and 210 s instead of 0: p50 210 s, p99 240 s, outside
    # max(30 %, 15 s)
    for label, want in (("wait p50 (all jobs)", 210.0), ("wait p99 (all jobs)", 240.0)):
        m = _metric(fid, label)
        assert (m["observed"], m["baseline"], m["gap"], m["allowed"]) == (0.0, want, want, 15.0)
        assert m["within"] is False
    assert _metric(fid, "wait p99 tenant physics")["baseline"] == 240.0
    # and the per-job wait error joins the four jobs: errors 0, 0, 210, 240
    assert fid["wait_error"] == {
        "jobs": 4,
        "median_s": 210.0,
        "mean_s": 112.5,
        "started_only_in_baseline": 0,
        "started_only_in_observed": 0,
        "started_only_in_baseline_first": [],
        "started_only_in_observed_first": [],
    }
    assert "GPU-hours" in fid["outside_tolerance"]
    assert "fidelity: 11 of 22 metrics outside tolerance" in r.output
    assert "started in both: median 3.5m, mean 1.9m" in r.output


@pytest.mark.parametrize(
    ("group", "observed", "baseline", "within"),
    [
        ("states", 5, 5, True),
        ("states", 5, 6, False),
        ("preemptions", 7, 6, True),
        ("preemptions", 7, 5, False),
        ("gpu_hours", 100.0, 102.0, True),
        ("gpu_hours", 100.0, 102.5, False),
        ("waits", 100.0, 130.0, True),  # 30 % of 100 s
        ("waits", 100.0, 131.0, False),
        ("waits", 10.0, 25.0, True),  # 15 s floor
        ("waits", 10.0, 26.0, False),
        ("waits", None, 26.0, False),  # a group on one side only
        ("waits", None, None, None),
    ],
)
def test_tolerance_flags(group, observed, baseline, within):
    # given a metric's observed and baseline values; then it is flagged by its tolerance
    assert Gap("m", "count", group, observed, baseline).within is within


def test_whatif_json_has_waits_by_tenant_partition_and_user_in_the_class_shape(history, tmp_path):
    # given the Slurm importer, which keeps each job's sacct `User` and `Partition` in the
    # observation file (alice submitted jobs 1 and 3, bob jobs 2 and 4)
    users = {o.job: o.user for o in obs.read(obs.sidecar(history))[1]}
    assert users == {"1": "alice", "2": "bob", "3": "alice", "4": "bob"}
    out = tmp_path / "m.json"
    r = runner.invoke(
        app, ["whatif", str(history), "--out", str(tmp_path / "r.html"), "--json", str(out)]
    )
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    for entry in ("observed", "recorded"):
        m = data[entry]["metrics"]
        # then every dimension has p50 and p99 keyed like `..._by_class`
        for q in ("p50", "p99"):
            assert set(m[f"wait_s_{q}_by_tenant"]) == {"physics"}
            assert set(m[f"wait_s_{q}_by_user"]) == {"alice", "bob"}
            assert set(m[f"wait_s_{q}_by_partition"]) == {"gpu"}
            assert all(isinstance(v, float) for v in m[f"wait_s_{q}_by_user"].values())
    # and the users' waits are the jobs' own: bob's high jobs waited 210 / 240 s in the baseline
    assert data["recorded"]["metrics"]["wait_s_p99_by_user"] == {"alice": 0.0, "bob": 240.0}
    assert data["observed"]["metrics"]["wait_s_p99_by_user"] == {"alice": 0.0, "bob": 0.0}
    assert "wait p99 user bob" in data["recorded"]["fidelity"]["outside_tolerance"]


def test_each_variant_shows_its_effect_against_the_baseline_and_observed(history, tmp_path):
    out, html = tmp_path / "m.json", tmp_path / "r.html"
    # when two variants are replayed: one that removes the cause, one that barely changes it
    r = runner.invoke(
        app,
        [
            "whatif",
            str(history),
            "--variant",
            "fix: policy.min_runtime_s=0",
            "--variant",
            "mr290: policy.min_runtime_s=290",
            "--out",
            str(html),
            "--json",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    fix = data["fix"]["effects"]["wait p99 (all jobs)"]
    # then the fix's effect is -240 s against the baseline and 0 against observed
    assert (fix["value"], fix["vs_baseline"], fix["vs_observed"]) == (0.0, -240.0, 0.0)
    assert fix["below_baseline_error"] is False
    # and a 10 s effect is smaller than the baseline's 240 s error: marked
    small = data["mr290"]["effects"]["wait p99 (all jobs)"]
    assert small["vs_baseline"] == -10.0 and small["below_baseline_error"] is True
    assert "(< error): an effect smaller than the baseline's own error" in r.output
    page = html.read_text()
    assert "-10.0s (&lt; error)" in page and "-4.0m (&lt; error)" not in page
    # and the completion rows compare the same jobs (all four completed everywhere)
    assert "completion time mean (4 jobs completed in all)" in page


class _Headings(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.h2: list[str] = []
        self.tables: list[list[list[str]]] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "h2":
            self._in = "h2"
            self.h2.append("")
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._in = "cell"
            self.tables[-1][-1].append("")

    def handle_endtag(self, tag):
        if tag in ("h2", "td", "th"):
            self._in = None

    def handle_data(self, data):
        if self._in == "h2":
            self.h2[-1] += data
        elif self._in == "cell":
            self.tables[-1][-1][-1] += data


def test_the_html_report_leads_with_the_fidelity_table(history, tmp_path):
    html = tmp_path / "r.html"
    r = runner.invoke(app, ["whatif", str(history), "--out", str(html)])
    assert r.exit_code == 0, r.output
    page = _Headings()
    page.feed(html.read_text())
    # then the first section and the first table are the fidelity table
    assert page.h2[0].startswith("Fidelity")
    first = page.tables[0]
    assert first[0] == ["metric", "observed", "baseline", "gap", "tolerance", "status"]
    rows = {row[0]: row for row in first}
    assert rows["preemptions"] == ["preemptions", "2", "2", "+0", "±1", "ok"]
    p99 = ["wait p99 (all jobs)", "0.0s", "4.0m", "+4.0m", "max(30 %, 15 s) = 15.0s", "OUTSIDE"]
    assert rows["wait p99 (all jobs)"] == p99


def test_compare_of_two_replays_prints_the_baselines_fidelity(history, tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert runner.invoke(app, ["replay", str(history), "--out", str(a)]).exit_code == 0
    args = ["replay", str(history), "--out", str(b), "--set", "policy.min_runtime_s=0"]
    assert runner.invoke(app, args).exit_code == 0
    out = tmp_path / "c.json"
    r = runner.invoke(app, ["compare", str(a), str(b), "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "baseline fidelity: A (a.jsonl) against observed" in r.output
    fid = json.loads(out.read_text())["fidelity"]
    assert _metric(fid, "wait p99 (all jobs)")["baseline"] == 240.0


def test_calibrate_finds_the_knob_that_is_off_and_validates_it(history, tmp_path):
    out = tmp_path / "cal.json"
    # when the knobs are fitted on the first pair of jobs
    r = runner.invoke(
        app,
        [
            "calibrate",
            str(history),
            "--knob",
            "min_runtime_s",
            "--json",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    # then the minimum runtime that forbade Slurm's preemptions is lowered
    assert result["knobs"]["min_runtime_s"] == {"recorded": 300, "fitted": 0}
    # and the per-job wait error falls on the fitting window and on the held-out one
    err = result["wait_error"]
    assert err["fit"]["before"]["mean_s"] == 120.0 and err["fit"]["after"]["mean_s"] == 0.0
    assert err["validate"]["before"]["mean_s"] == 105.0
    assert err["validate"]["after"]["mean_s"] == 0.0
    assert result["windows"] == {"fit_jobs": 2, "validate_jobs": 2}
    assert "use: --set policy.min_runtime_s=0" in r.output
    # and over the whole history every fidelity metric is then inside its tolerance
    assert len(result["outside_tolerance"]["before"]) == 11
    assert result["outside_tolerance"]["after"] == []


def test_calibrate_refuses_an_unknown_knob_and_a_log_without_observations(history, tmp_path):
    r = runner.invoke(app, ["calibrate", str(history), "--knob", "sched_interval"])
    assert r.exit_code == 2 and "unknown knob 'sched_interval'" in r.output
    obs.sidecar(history).unlink()
    r = runner.invoke(app, ["calibrate", str(history)])
    assert r.exit_code == 2 and "no observation file (h.observed.jsonl)" in r.output


def test_calibrate_fits_slurm_s_backfill_interval_under_the_slurm_profile_only(history, tmp_path):
    # given the real Slurm's production dump imported with its slurm.conf (bf_interval=2)
    from tests.slurm.fidelity import import_with_site

    prod = tmp_path / "prod.jsonl"
    import_with_site(FIXTURES / "slurm-real" / "production", prod)
    out = tmp_path / "cal.json"
    # when the backfill interval is fitted
    knob = "slurm.backfill_interval_s=2,30"
    r = runner.invoke(app, ["calibrate", str(prod), "--knob", knob, "--json", str(out)])
    assert r.exit_code == 0, r.output
    # then it starts from the site's value, and both windows' errors are reported
    result = json.loads(out.read_text())
    assert result["knobs"]["slurm.backfill_interval_s"]["recorded"] == 2
    assert set(result["wait_error"]) == {"fit", "validate"}
    assert "policy.slurm.backfill_interval_s = " in r.output
    # and on a history under the native profile the knob changes nothing: it is not fitted
    r = runner.invoke(app, ["calibrate", str(history), "--knob", knob, "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["knobs"] == {}


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IMPORTS = {
    "slurm": [
        "slurm",
        "--sacct",
        str(FIXTURES / "slurm" / "sacct-observed.txt"),
        "--sinfo",
        str(FIXTURES / "slurm" / "sinfo.txt"),
    ],
    "slurm-real": [
        "slurm",
        "--sacct",
        str(FIXTURES / "slurm-real" / "sacct.txt"),
        "--sinfo",
        str(FIXTURES / "slurm-real" / "sinfo-partitions.txt"),
    ],
    "openb": [
        "alibaba-openb",
        "--pods",
        str(FIXTURES / "openb" / "openb_pod_list_default.csv"),
        "--nodes",
        str(FIXTURES / "openb" / "openb_node_list_gpu_node.csv"),
    ],
    "csv": [
        "csv",
        str(FIXTURES / "csv" / "jobs.csv"),
        "--mapping",
        str(FIXTURES / "csv" / "mapping.yaml"),
        "--config-nodes",
        str(FIXTURES / "csv" / "nodes.yaml"),
    ],
}


@pytest.mark.parametrize("source", sorted(IMPORTS))
def test_the_per_job_wait_error_joins_the_same_jobs_an_independent_join_finds(source, tmp_path):
    # given each importer's fixture, imported and replayed under its recorded configuration
    log, out = tmp_path / "in.jsonl", tmp_path / "r.json"
    r = runner.invoke(app, ["import", *IMPORTS[source], "--out", str(log)])
    assert r.exit_code == 0, r.output
    args = ["replay", str(log), "--out", str(tmp_path / "r.jsonl"), "--json", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    fid = data["fidelity"]
    # when the waits are joined here, from the observation file and the replay's job rows
    _, items = obs.read(obs.sidecar(log))
    seen = list(items)
    observed = {
        o.job: (o.first_start - o.submit_ms) / 1000
        for o in seen
        if not o.started_before and o.first_start is not None
    }
    replayed = {
        j["id"]: j["placements"][0]["at_s"] - j["submitted_at_s"]
        for j in data["jobs"]
        if "tasks" not in j and j["placements"]
    }
    both = sorted(set(observed) & set(replayed))
    errs = sorted(abs(replayed[j] - observed[j]) for j in both)
    # then both sides count the same jobs, and the report's join is this join
    submitted = _metric(fid, "jobs submitted")
    assert submitted["observed"] == submitted["baseline"] == len(seen)
    assert fid["wait_error"]["jobs"] == len(both) > 0
    assert fid["wait_error"]["median_s"] == pytest.approx(errs[round(0.5 * (len(errs) - 1))])
    assert fid["wait_error"]["mean_s"] == pytest.approx(sum(errs) / len(errs))
    only_observed = sorted(set(observed) - set(replayed))
    assert fid["wait_error"]["started_only_in_observed"] == len(only_observed)
    assert fid["wait_error"]["started_only_in_observed_first"] == only_observed[:20]
    # and so are the jobs that never started in the history but ran in the replay
    measurable = {o.job for o in seen if not o.started_before}
    only_baseline = sorted(j for j in set(replayed) - set(observed) if j in measurable)
    assert fid["wait_error"]["started_only_in_baseline"] == len(only_baseline)
    assert fid["wait_error"]["started_only_in_baseline_first"] == only_baseline[:20]
    # and the waits per tenant are reported for every tenant, None where no job started
    by_tenant = data["observed"]["wait_s_p50_by_tenant"]
    assert set(by_tenant) == {o.tenant for o in seen}
    started = {o.tenant for o in seen if o.job in observed}
    assert {t for t, v in by_tenant.items() if v is not None} == started
    # and timeouts are counted alike: the source's TIMEOUT, the replay's `timeout` state
    assert data["observed"]["jobs_timeout"] == sum(o.state.startswith("TIMEOUT") for o in seen)
    assert data["metrics"]["jobs_timeout"] == sum(j["state"] == "timeout" for j in data["jobs"])
    assert _metric(fid, "jobs timeout")["observed"] == data["observed"]["jobs_timeout"]
    if source == "slurm":
        assert data["observed"]["jobs_timeout"] == 1  # job 2005
    if source == "slurm-real":  # partitions from `sinfo ... %P`: the jobs' node selectors
        assert set(data["observed"]["wait_s_p50_by_partition"]) == {"high", "low"}
        assert set(data["metrics"]["wait_s_p50_by_partition"]) == {"high", "low"}


def test_an_array_that_never_had_tasks_counts_as_its_tasks_everywhere():
    """The issue saw "48 jobs" beside "77 jobs": an array the replay rejects never gets task
    records, and counted as nothing while the source lists each task."""
    from gpuledger.replay.metrics import measure
    from gpuledger.replay.report import jobs_text, report
    from gpuledger.replay.scenario import from_document
    from gpuledger.replay.simulator import simulate

    # given a 6-task array no node can hold (16 GPUs each on an 8-GPU node) and one job
    big = {"id": "a", "tenant": "ml", "gpus": 16, "duration": "1h", "array": {"count": 6}}
    small = {"id": "b", "tenant": "ml", "gpus": 1, "duration": "1h"}
    doc = {
        "cluster": {"nodes": [{"name": "gpu-1", "gpus": 8}]},
        "tenants": [{"name": "ml", "guaranteed": 8}],
        "timeline": [{"at": 0, "submit": big}, {"at": 0, "submit": small}],
    }
    sim = simulate(from_document(doc))
    # then the metrics and the replay's summary line both count 7 jobs, 6 of them rejected
    jobs = measure(sim.log).metrics["jobs"]
    assert (jobs["submitted"], jobs["rejected"], jobs["completed"]) == (7, 6, 1)
    text = jobs_text(report(sim.ledger, sim.log, sim.now_ms)["jobs"])
    assert text == "7 jobs (1 arrays) {'rejected': 6, 'completed': 1}"


def test_a_terminal_shows_a_crowded_dimension_only_where_it_is_outside_tolerance():
    from gpuledger.replay.fidelity import Fidelity, WaitError, table_rows, trim_groups

    # given 14 users, one of them outside its tolerance
    gaps = [Gap("preemptions", "count", "preemptions", 1, 1)]
    gaps += [Gap(f"wait p50 user u{i:02}", "seconds", "waits", 10.0, 10.0) for i in range(13)]
    gaps.append(Gap("wait p50 user u13", "seconds", "waits", 10.0, 99.0))
    f = Fidelity(gaps, WaitError(0, None, None, 0, 0))
    # then the fidelity table keeps that user's row and counts the 13 others
    labels = [r[0] for r in table_rows(f, limit=12)]
    assert labels == [
        "preemptions",
        "wait p50 user u13",
        "(13 wait rows by user within tolerance not shown)",
    ]
    assert len(table_rows(f)) == 15  # no limit: the report and --json have every row
    # and the comparison table drops the dimension's rows, saying where they are
    body = [[g.label, "x"] for g in gaps]
    assert [r[0] for r in trim_groups(body, 12)] == [
        "preemptions",
        "(14 users: their wait rows are in --json and the report)",
    ]


def test_a_sweep_prints_and_reports_the_same_baseline_fidelity_as_whatif(history, tmp_path):
    # given the history's what-if as one replay and as a sweep of two variants
    single, swept = tmp_path / "single.json", tmp_path / "swept.json"
    args = ["whatif", str(history), "--variant", "loose: policy.min_runtime_s=0"]
    r1 = runner.invoke(app, [*args, "--out", str(tmp_path / "1.html"), "--json", str(single)])
    # when it runs as a sweep (in process: one worker)
    r2 = runner.invoke(
        app, [*args, "--workers", "1", "--out", str(tmp_path / "2.html"), "--json", str(swept)]
    )
    assert (r1.exit_code, r2.exit_code) == (0, 0), r2.output
    # then the sweep states the recorded baseline's gap to what happened, as whatif does:
    # the same metrics, the same numbers, the same summary line
    want = json.loads(single.read_text())["recorded"]["fidelity"]
    got = json.loads(swept.read_text())["fidelity"]
    assert got == want
    assert _metric(got, "wait p99 tenant physics")["baseline"] == 240.0
    assert "baseline fidelity" in r2.output
    assert "fidelity: 11 of 22 metrics outside tolerance" in r2.output
