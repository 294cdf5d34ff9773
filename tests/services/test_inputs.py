"""The strict input schema, through the command line: given a file with one bad input, when
`gpuledger check` (or `simulate`, `up`, `submit`, `cancel`) reads it, then it prints one
`error: FILE: key.path: what (did you mean ...)` line and exits 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpuledger import events as ev
from gpuledger.services.cli.main import app
from gpuledger.services.domain.fold.config import ConfigState

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

NODES = [
    {"name": "n1", "gpus": 8, "model": "H100-80GB"},
    {"name": "m1", "gpus": 2, "model": "H100-80GB", "sharing": "mig"},
]
TENANTS = [{"name": "org/a", "guaranteed": 4}]


def scenario(**changes) -> dict:
    doc = {
        "cluster": {"nodes": [dict(n) for n in NODES]},
        "tenants": [dict(t) for t in TENANTS],
        "timeline": [{"at": 0, "submit": {"id": "j1", "tenant": "org/a", "gpus": 1}}],
    }
    doc.update(changes)
    return doc


def entry(**submit) -> dict:
    return {"at": 5, "submit": {"id": "j2", "tenant": "org/a", "gpus": 1, **submit}}


def run(tmp_path: Path, doc: dict, *args: str, name: str = "in.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, [*(args or ("check",)), str(path)])
    return path, result


def one_error(tmp_path: Path, doc: dict, *args: str) -> str:
    path, result = run(tmp_path, doc, *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in result.output
    assert lines[0].startswith(f"error: {path}: ")
    return lines[0].removeprefix(f"error: {path}: ")


CASES = [
    (
        "class-preemptable",
        scenario(priority_classes=[{"name": "gold", "value": 5, "preemptable": False}]),
        "priority_classes[0].preemptable: unknown key (did you mean 'preemptible'?)",
    ),
    (
        "tenant-guarantee",
        scenario(tenants=[{"name": "org/a", "guarantee": 4}]),
        "tenants[0].guarantee: unknown key (did you mean 'guaranteed'?)",
    ),
    (
        "node-shareing",
        scenario(cluster={"nodes": [{"name": "n1", "gpus": 8, "shareing": "mig"}]}),
        "cluster.nodes[0].shareing: unknown key (did you mean 'sharing'?)",
    ),
    (
        "top-level-polcy",
        scenario(polcy={"preemption": False}),
        "polcy: unknown key (did you mean 'policy'?)",
    ),
    (
        "checkpoint-key",
        scenario(timeline=[entry(checkpoint={"intervall": "10m"})]),
        "timeline[0].submit.checkpoint.intervall: unknown key (did you mean 'interval'?)",
    ),
    (
        "misspelled-at",
        scenario(timeline=[{"att": 600, "cancel": "j1"}]),
        "timeline[0].att: unknown key (did you mean 'at'?)",
    ),
    (
        "submit-and-cancel",
        scenario(
            timeline=[
                {"at": 0, "submit": {"id": "j1", "tenant": "org/a", "gpus": 1}, "cancel": "j1"}
            ]
        ),
        "timeline[0]: an entry needs exactly one of submit, cancel, scale, node_down, hold, release, requeue, update, top, cordon, uncordon, drain, maintenance, maintenance_cancel (got submit, cancel)",
    ),
    (
        "negative-at",
        scenario(timeline=[{"at": -5, "submit": {"id": "j1", "tenant": "org/a", "gpus": 1}}]),
        "timeline[0].at: must be >= 0 (got -5)",
    ),
    (
        "negative-duration",
        scenario(timeline=[entry(duration="-2h")]),
        "timeline[0].submit.duration: cannot read '-2h': use seconds or a duration like 90s, 10m, 2h, 1d",
    ),
    (
        "negative-policy-time",
        scenario(policy={"min_runtime_s": -1}),
        "policy.min_runtime_s: must be >= 0 (got -1)",
    ),
    (
        "unknown-unit",
        scenario(cluster={"nodes": [{"name": "n1", "gpus": 8, "memory": "36Gx"}]}),
        "cluster.nodes[0].memory: cannot read '36Gx': use a size like 512Mi, 36Gi or 1Ti (a bare number is MiB)",
    ),
    (
        "negative-model-guarantee",
        scenario(tenants=[{"name": "org/a", "guaranteed_by_model": {"H100-80GB": -1}}]),
        "tenants[0].guaranteed_by_model.H100-80GB: must be >= 0 (got -1)",
    ),
    (
        "duplicate-node",
        scenario(cluster={"nodes": [{"name": "n1", "gpus": 8}, {"name": "n1", "gpus": 8}]}),
        "cluster.nodes[1]: duplicate node name 'n1' (first at cluster.nodes[0])",
    ),
    (
        "duplicate-prefix-node",
        scenario(
            cluster={
                "nodes": [{"name": "a2", "gpus": 8}, {"name_prefix": "a", "count": 2, "gpus": 8}]
            }
        ),
        "cluster.nodes[1]: duplicate node name 'a2' (first at cluster.nodes[0])",
    ),
    (
        "duplicate-job-id",
        scenario(timeline=[entry(), entry()]),
        "timeline[1].submit.id: duplicate job id 'j2' (first at timeline[0].submit)",
    ),
    (
        "duplicate-tenant",
        scenario(tenants=[{"name": "org/a"}, {"name": "org/a"}]),
        "tenants[1].name: duplicate tenant 'org/a' (first at tenants[0].name)",
    ),
    (
        "sharing-bogus",
        scenario(cluster={"nodes": [{"name": "n1", "gpus": 8, "sharing": "bogus"}]}),
        "cluster.nodes[0].sharing: 'bogus' is not one of exclusive, mig, mps, timeslice",
    ),
    (
        "redefined-builtin-class",
        scenario(priority_classes=[{"name": "train", "value": 10}]),
        "priority_classes[0].name: 'train' is a built-in priority class (value 50); add `override: true` "
        "to redefine it, or choose another name",
    ),
    (
        "placement-bestfitt",
        scenario(policy={"placement_policy": "bestfitt"}),
        "policy.placement_policy: 'bestfitt' is not one of bestfit, default, fgd, packing (did you mean 'bestfit'?)",
    ),
    (
        "scope-clustr",
        scenario(policy={"preemption_scope": "clustr"}),
        "policy.preemption_scope: 'clustr' is not one of cluster, tenant (did you mean 'cluster'?)",
    ),
    (
        "mig-not-in-fleet",
        scenario(timeline=[entry(gpus=0, mig="3g.20gb")]),
        "timeline[0].submit.mig: MIG profile '3g.20gb' is offered by no GPU of the cluster (did you mean '3g.40gb'?)",
    ),
    (
        "unknown-tenant",
        scenario(timeline=[entry(tenant="org/b")]),
        "timeline[0].submit.tenant: tenant 'org/b' is not configured (did you mean 'org/a'?)",
    ),
    (
        "unknown-class",
        scenario(timeline=[entry(**{"class": "trian"})]),
        "timeline[0].submit.class: priority class 'trian' is not configured (did you mean 'train'?)",
    ),
    (
        "unknown-model",
        # (`H100-80G` is an alias of H100-80GB in the GPU model vocabulary: accepted)
        scenario(timeline=[entry(models=["H100-40GB"])]),
        "timeline[0].submit.models: no GPU of model 'H100-40GB' in the cluster (did you mean 'H100-80GB'?)",
    ),
    (
        "unknown-model-of-a-users-bound",
        scenario(
            tenants=[{"name": "org/a", "users": {"default": {"gpus_by_model": {"H100-40GB": 2}}}}]
        ),
        "tenants[0].users.default.gpus_by_model.H100-40GB: no GPU of model 'H100-40GB' in the cluster (did you mean 'H100-80GB'?)",
    ),
    (
        "spread-zero-per-node",
        scenario(timeline=[entry(spread={"group": "web", "max_per_node": 0})]),
        "timeline[0].submit.spread.max_per_node: must be >= 1 (got 0)",
    ),
    (
        "spread-unknown-key",
        scenario(timeline=[entry(spread={"group": "web", "max_per_node": 1, "per_nod": 2})]),
        "timeline[0].submit.spread.per_nod: unknown key (did you mean 'max_per_node'?)",
    ),
    (
        "spread-not-a-mapping",
        scenario(timeline=[entry(spread="web")]),
        "timeline[0].submit.spread: expected `object | null`, got `str` (got 'web')",
    ),
    (
        "cancel-unknown-job",
        scenario(timeline=[{"at": 0, "cancel": "j7"}]),
        "timeline[0].cancel: job 'j7' is not submitted earlier in the timeline",
    ),
]


@pytest.mark.parametrize("doc, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_input_is_one_line_with_its_key_path_and_exit_2(tmp_path, doc, expected):
    assert one_error(tmp_path, doc) == expected


@pytest.mark.parametrize(
    "doc, expected",
    [c[1:] for c in CASES if c[0] in ("class-preemptable", "placement-bestfitt")],
    ids=["class", "policy"],
)
def test_simulate_refuses_the_same_file_with_the_same_line(tmp_path, doc, expected):
    assert one_error(tmp_path, doc, "simulate") == expected


def test_every_problem_of_a_file_gets_its_own_line(tmp_path):
    doc = scenario(
        tenants=[{"name": "org/a", "guarantee": 4}],
        polcy={},
        cluster={"nodes": [{"name": "n1", "shareing": "mig"}, {"name": "n2", "sharing": "bogus"}]},
    )
    path, result = run(tmp_path, doc)  # keys in file order (safe_dump sorts them)
    assert result.exit_code == 2
    assert [line.split(": ")[2] for line in result.stderr.splitlines()] == [
        "cluster.nodes[0].shareing",
        "cluster.nodes[1].sharing",
        "polcy",
        "tenants[0].guarantee",
    ]


def test_a_redefined_builtin_class_is_accepted_with_override(tmp_path):
    doc = scenario(priority_classes=[{"name": "train", "value": 10, "override": True}])
    path, result = run(tmp_path, doc)
    assert result.exit_code == 0 and result.stdout.strip() == f"ok {path} (scenario)"


def test_a_job_file_with_a_typo_is_refused_by_check_and_submit(tmp_path):
    doc = {"id": "j1", "tenant": "org/a", "clas": "train", "gpus": 8}
    for args in (("check",), ("submit", "--nats-url", "nats://127.0.0.1:1")):
        assert one_error(tmp_path, doc, *args) == "clas: unknown key (did you mean 'class'?)"


def test_a_job_file_spread_becomes_the_jobs_spread_constraint_and_typos_are_refused(tmp_path):
    """Given job files with `spread:`, when they are read (the path of `check` and `submit`),
    then a valid one carries `JobSpec.spread`, a file without it none, and a misspelled key
    inside it or of it is refused with a did-you-mean line."""
    from gpuledger.services.domain.inputs.jobfile import JobFileError, job_spec

    doc = {
        "id": "web-1",
        "tenant": "org/a",
        "gpus": 1,
        "spread": {"group": "web", "max_per_node": 2},
    }
    assert job_spec(doc).spread == ev.Spread(group="web", max_per_node=2)
    assert not job_spec({"id": "batch-1", "tenant": "org/a", "gpus": 1}).spread
    path, result = run(tmp_path, doc)
    assert result.exit_code == 0, result.output
    assert one_error(
        tmp_path, {**doc, "spread": {"group": "web", "max_per_node": 1, "per_nod": 2}}
    ) == ("spread.per_nod: unknown key (did you mean 'max_per_node'?)")
    with pytest.raises(JobFileError) as bad:
        job_spec({**doc, "spread": {"grup": "web", "max_per_node": 2}})
    assert bad.value.problems == [
        "spread.grup: unknown key (did you mean 'group'?)",
        "spread: missing required key 'group'",
    ]
    assert (
        one_error(
            tmp_path,
            {"id": "web-1", "tenant": "org/a", "sprad": {"group": "web"}},
            "submit",
            "--nats-url",
            "nats://127.0.0.1:1",
        )
        == "sprad: unknown key (did you mean 'spread'?)"
    )


def test_a_config_with_a_policy_typo_is_refused_by_up_before_anything_starts(tmp_path):
    doc = {"cluster": {"nodes": NODES}, "policy": {"placement_policy": "bestfitt"}}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["up", "--config", str(path), "--data", str(tmp_path / "data")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip() == (
        f"error: {path}: policy.placement_policy: 'bestfitt' is not one of "
        "bestfit, default, fgd, packing (did you mean 'bestfit'?)"
    )
    assert not (tmp_path / "data").exists()


def test_cancel_with_a_bad_job_id_is_one_line(tmp_path):
    result = runner.invoke(
        app, ["cancel", "bad.id", "--tenant", "org/a", "--nats-url", "nats://127.0.0.1:1"]
    )
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("error: invalid job id 'bad.id': ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_raw_ci_event_is_checked_against_the_event_schema(tmp_path):
    bad = {
        "type": "JobSubmitted.v1",
        "job": {"job_id": "j", "tenant": "org/a", "resources": {"gpu": 1}},
    }
    path = tmp_path / "event.json"
    path.write_text(json.dumps(bad))
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 2
    assert (
        result.stderr.strip()
        == f"error: {path}: job.resources.gpu: unknown key (did you mean 'gpus'?)"
    )


def test_every_shipped_example_and_scenario_validates():
    """CSV import mappings (`*-mapping.yaml`) are not cluster files: their own loader checks them."""
    from gpuledger.replay.importers.csvtrace import load_csv_mapping

    examples = sorted((ROOT / "examples").glob("*.yaml"))
    mappings = [p for p in examples if p.name.endswith("-mapping.yaml")]
    files = sorted(
        str(p)
        for p in [
            *(p for p in examples if p not in mappings),
            *(ROOT / "replay" / "scenarios").glob("*.yaml"),
            ROOT / "deploy" / "cluster.yaml",
        ]
    )
    result = runner.invoke(app, ["check", *files])
    assert result.exit_code == 0, result.stderr
    assert len(result.stdout.splitlines()) == len(files)
    assert mappings and all(load_csv_mapping(p) for p in mappings)


def test_the_published_file_schema_rejects_unknown_keys():
    result = runner.invoke(app, ["schema", "--config"])
    schema = json.loads(result.stdout)
    assert result.exit_code == 0
    assert {"FileDoc", "JobDoc", "NodeDoc", "TenantDoc", "ClassDoc", "EntryDoc"} <= set(
        schema["$defs"]
    )
    assert all(
        d.get("additionalProperties") is False
        for d in schema["$defs"].values()
        if d.get("type") == "object"
    )
    spread = schema["$defs"]["SpreadDoc"]
    assert (
        set(spread["required"]) == {"group", "max_per_node"}
        and spread["additionalProperties"] is False
    )
    assert spread["properties"]["max_per_node"]["minimum"] == 1
    assert "SpreadDoc" in json.dumps(schema["$defs"]["JobDoc"]["properties"]["spread"])
    node = schema["$defs"]["NodeDoc"]["properties"]["sharing"]
    assert {"enum": ["exclusive", "mig", "mps", "timeslice"]} in node["anyOf"]


def test_the_fold_refuses_a_policy_outside_its_closed_sets():
    """Events built in Python skip decode validation; the fold keeps the policy in force."""
    state = ConfigState()
    state.apply(ev.PolicyConfigured(policy=ev.Policy(placement_policy="packing")))
    before = state.digest
    state.apply(ev.PolicyConfigured(policy=ev.Policy(placement_policy="bestfitt")))  # type: ignore[arg-type]  # a bad value on purpose
    assert state.policy.placement_policy == "packing" and state.digest == before
    state.apply(ev.TenantConfigured(tenant="org/a", guaranteed_gpu_milli=4000))
    state.apply(ev.TenantConfigured(tenant="org/a", guaranteed_gpu_milli=-1000))
    assert state.tenants["org/a"].guaranteed_gpu_milli == 4000


@pytest.mark.parametrize(
    "raw, where",
    [
        (
            b'{"type":"PolicyConfigured.v1","policy":{"preemption_scope":"clustr"}}',
            "preemption_scope",
        ),
        (
            b'{"type":"PolicyConfigured.v1","policy":{"placement_policy":"bestfitt"}}',
            "placement_policy",
        ),
        (
            b'{"type":"TenantConfigured.v1","tenant":"a","guaranteed_gpu_milli":-1}',
            "guaranteed_gpu_milli",
        ),
    ],
)
def test_a_bad_config_event_does_not_decode(raw, where):
    """So the host dead-letters it with this reason instead of folding it."""
    with pytest.raises(ev.UndecodableEvent, match=where):
        ev.decode(raw)


def test_a_job_file_after_a_configuration_is_checked_against_it(tmp_path):
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump({"cluster": {"nodes": NODES}, "tenants": TENANTS}))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"id": "j", "tenant": "org/a", "mig": "3g.20gb"}))
    alone = runner.invoke(app, ["check", str(job)])
    both = runner.invoke(app, ["check", str(config), str(job)])
    assert alone.exit_code == 0 and alone.stdout.strip() == f"ok {job} (job)"
    assert both.exit_code == 2 and both.stdout.strip() == f"ok {config} (config)"
    assert both.stderr.strip() == (
        f"error: {job}: mig: MIG profile '3g.20gb' is offered by no GPU of the "
        "cluster (did you mean '3g.40gb'?)"
    )
