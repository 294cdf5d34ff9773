"""Node labels and `node_selector` from the files users write to the scheduler's decisions:
config `labels:` on nodes, `node_selector:` in job files (what `check`, `submit`, the HTTP
gateway and scenario files read), the event contract, and the pending reason `why` shows."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.services.cli.main import app
from gpuledger.services.domain.inputs.jobfile import JobFileError, job_spec

runner = CliRunner()

CLUSTER = {
    "cluster": {
        "nodes": [
            {"name_prefix": "h", "count": 2, "gpus": 8, "labels": {"partition": "h100"}},
            {
                "name_prefix": "a",
                "count": 1,
                "gpus": 8,
                "model": "A100-80GB",
                "labels": {"partition": "a100", "zone": "eu"},
            },
        ]
    },
    "tenants": [{"name": "org/a", "guaranteed": 16}],
}


def test_a_job_files_node_selector_becomes_the_jobs_selector():
    spec = job_spec({"id": "j", "tenant": "org/a", "gpus": 1, "node_selector": {"zone": "eu"}})
    assert spec.node_selector == {"zone": "eu"}
    assert spec.selector() == (("zone", "eu"),)
    plain = job_spec({"id": "j", "tenant": "org/a", "gpus": 1})
    assert not plain.node_selector  # unset
    assert plain.selector() == ()


def test_an_unset_selector_encodes_as_before_and_a_set_one_round_trips():
    plain = ev.JobSubmitted(
        job=ev.JobSpec(job_id="x", tenant="t"),
        event_id="e",
        occurred_at_ms=0,
        correlation_id="x",
        producer="p",
    )
    assert b"node_selector" not in ev.encode(plain)
    sel = ev.JobSubmitted(
        job=ev.JobSpec(job_id="x", tenant="t", node_selector={"partition": "a100"}),
        event_id="e",
        occurred_at_ms=0,
        correlation_id="x",
        producer="p",
    )
    assert ev.decode(ev.encode(sel)).job.node_selector == {"partition": "a100"}


def test_a_selector_that_breaks_the_contract_does_not_decode():
    raw = ev.encode(
        ev.JobSubmitted(
            job=ev.JobSpec(job_id="x", tenant="t", node_selector={"": "a"}),
            event_id="e",
            occurred_at_ms=0,
            correlation_id="x",
            producer="p",
        )
    )
    with pytest.raises(ev.UndecodableEvent, match="node_selector"):
        ev.decode(raw)


def _check(tmp_path: Path, *docs: dict):
    paths = []
    for i, doc in enumerate(docs):
        p = tmp_path / f"f{i}.yaml"
        p.write_text(yaml.safe_dump(doc))
        paths.append(p)
    return paths, runner.invoke(app, ["check", *map(str, paths)])


def test_check_accepts_a_selector_some_node_carries(tmp_path):
    (_, job), result = _check(
        tmp_path,
        CLUSTER,
        {"id": "j", "tenant": "org/a", "gpus": 1, "node_selector": {"partition": "a100"}},
    )
    assert result.exit_code == 0, result.output
    assert f"ok {job} (job)" in result.stdout


def test_check_refuses_a_selector_no_node_carries_in_one_line(tmp_path):
    (_, job), result = _check(
        tmp_path,
        CLUSTER,
        {"id": "j", "tenant": "org/a", "gpus": 1, "node_selector": {"partition": "a10"}},
    )
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {job}: node_selector: no node of the cluster carries partition=a10 "
        "(did you mean 'partition=a100'?)"
    )
    assert "Traceback" not in result.output


def test_check_refuses_labels_together_only_on_different_nodes(tmp_path):
    (_, job), result = _check(
        tmp_path,
        CLUSTER,
        {
            "id": "j",
            "tenant": "org/a",
            "gpus": 1,
            "node_selector": {"partition": "h100", "zone": "eu"},
        },
    )
    assert result.exit_code == 2
    assert "no node of the cluster carries partition=h100,zone=eu" in result.stderr
    assert "node labels: partition=a100, partition=h100, zone=eu" in result.stderr


@pytest.mark.parametrize(
    "selector, expected",
    [
        ("a100", "node_selector: expected `object | null`, got `str` (got 'a100')"),
        ({"partition": 3}, "node_selector.partition: expected `str`, got `int` (got 3)"),
        ({"": "a100"}, "node_selector: key '': expected `str` of length >= 1 (got '')"),
    ],
)
def test_a_malformed_selector_is_one_line(tmp_path, selector, expected):
    with pytest.raises(JobFileError) as bad:
        job_spec({"id": "j", "tenant": "org/a", "gpus": 1, "node_selector": selector})
    assert bad.value.problems == [expected]


def _scenario(timeline):
    from gpuledger.replay.scenario import from_document
    from gpuledger.replay.simulator import simulate

    return simulate(from_document({**CLUSTER, "timeline": timeline}))


def test_a_scenarios_selected_jobs_run_only_in_their_partition():
    """Given two h100 nodes and one a100 node, when three 8-GPU jobs select partition=a100
    (each 30 s), then they run one after another on a1 while the h100 nodes stay idle, and the
    waiting ones say why: the other nodes are not in the partition."""
    job = {"tenant": "org/a", "gpus": 8, "duration": 30, "node_selector": {"partition": "a100"}}
    sim = _scenario([{"at": 0, "submit": {"id": f"j{i}", **job}} for i in range(3)])
    runs = {
        j: [(at, m.node) for at, members in sim.ledger.jobs[j].placements for m in members]
        for j in ("j0", "j1", "j2")
    }
    assert runs == {"j0": [(0, "a1")], "j1": [(30_000, "a1")], "j2": [(60_000, "a1")]}
    pending = [
        e for _, _, e in sim.log if isinstance(e, ev.PendingReasonChanged) and e.job_id == "j2"
    ]
    assert pending[0].reason == "Resources"
    assert "0/3 nodes: 2 not in partition=a100, 1 insufficient free GPUs" in pending[0].message


def test_a_selector_no_node_matches_waits_unschedulable():
    """Given a job published directly (no scenario check) selecting a partition no node is
    in, then it is admitted but waits `Unschedulable`, counting every node as not in it."""
    from gpuledger.replay.simulator import Simulator, standard_services
    from gpuledger.services.domain.inputs.configfile import config_events, node_infos
    from gpuledger.services.domain.tooling.stamp import submission

    sim = Simulator(standard_services(node_infos(CLUSTER)))
    for e in config_events(CLUSTER):
        sim.publish(e)
    spec = ev.JobSpec(
        job_id="j",
        tenant="org/a",
        resources=ev.Resources(gpus=1),
        node_selector={"partition": "v100"},
    )
    sim.schedule([(0, submission(spec, now_ms=0, producer="test"))])
    sim.run(10_000)
    assert not sim.ledger.jobs["j"].placements
    pending = [e for _, _, e in sim.log if isinstance(e, ev.PendingReasonChanged)]
    assert pending[-1].reason == "Unschedulable"
    assert "0/3 nodes: 3 not in partition=v100" in pending[-1].message


def test_preemption_frees_capacity_inside_the_selected_partition():
    """Given both partitions full of preemptible `train` jobs, when an `inference` job (higher,
    non-preemptible) selects partition a100, then the victim is the job on the a100 node (the
    job on an h100 node would not help), and the inference job runs there."""
    low = {"tenant": "org/a", "gpus": 8, "duration": 3600}
    doc = {
        "cluster": {
            "nodes": [
                {"name": "h1", "gpus": 8, "labels": {"partition": "h100"}},
                {"name": "a1", "gpus": 8, "model": "A100-80GB", "labels": {"partition": "a100"}},
            ]
        },
        "tenants": [{"name": "org/a", "guaranteed": 16}],
        "policy": {"min_runtime_s": 0},
        "timeline": [
            # low-a runs longer (more lost work): without the selector, low-h is the victim
            {"at": 0, "submit": {"id": "low-a", **low, "node_selector": {"partition": "a100"}}},
            {"at": 30, "submit": {"id": "low-h", **low, "node_selector": {"partition": "h100"}}},
            {
                "at": 60,
                "submit": {
                    "id": "serve",
                    "tenant": "org/a",
                    "class": "inference",
                    "gpus": 8,
                    "duration": 600,
                    "node_selector": {"partition": "a100"},
                },
            },
        ],
        "until": "2h",
    }
    from gpuledger.replay.scenario import from_document
    from gpuledger.replay.simulator import simulate

    sim = simulate(from_document(doc))
    jobs = sim.ledger.jobs
    victims = [e.job_id for _, _, e in sim.log if isinstance(e, ev.PreemptionRequested)]
    assert victims == ["low-a"]
    assert [m.node for _, ms in jobs["serve"].placements for m in ms] == ["a1"]


def test_check_reads_a_raw_ci_event_with_a_bad_selector_in_one_line(tmp_path):
    event = {
        "type": "JobSubmitted.v1",
        "job": {"job_id": "j", "tenant": "org/a", "node_selector": {"partition": 3}},
    }
    (path,), result = _check(tmp_path, event)
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {path}: job.node_selector.partition: expected `str`, got `int` (got 3)"
    )
