"""The chaos soak CI runs (issue 14): `gpuledger chaos --duration 120` on a 3-node NATS cluster,
every service, node agent and the projector its own supervised process, authentication on, at
least 20 faults injected (kill -9, restart, SIGSTOP/SIGCONT of services, node agents, the
projector and NATS nodes), and every invariant holds at the end. About 2.5 minutes."""

import json

import pytest

from tests.integration.cluster import cli

pytestmark = [pytest.mark.integration, pytest.mark.long]


def test_a_two_minute_soak_with_twenty_faults_keeps_every_invariant(tmp_path):
    out = tmp_path / "chaos.json"
    run = cli(
        "chaos",
        "--duration",
        "120",
        "--seed",
        "1",
        "--nats-cluster",
        "3",
        "--json",
        str(out),
        "--data",
        str(tmp_path / "data"),
        timeout=480,
    )
    logs = "\n".join(
        p.read_text()[-1500:] for p in sorted((tmp_path / "data" / "logs").glob("*.log"))
    )
    assert run.returncode == 0 and out.exists(), run.stdout[-4000:] + run.stderr[-4000:] + logs
    report = json.loads(out.read_text())

    # every invariant was checked and holds
    assert report["invariants"] == {
        "no_lost_job": True,
        "no_double_allocation": True,
        "no_partial_gang": True,
        "running_members_placed": True,
        "projection_equals_rebuild": True,
        "verify_zero_mismatches": True,
    }
    # at least 20 faults landed, of every kind, on every kind of process
    done = [f for f in report["faults"] if f["outcome"] == "done"]
    assert len(done) >= 20, report["faults"]
    assert {f["kind"] for f in done} == {"kill9", "restart", "pause"}
    assert {f["target_kind"] for f in done} == {"service", "node-agent", "projector", "nats"}
    # under a real load: jobs were acknowledged, placed, preempted and completed meanwhile
    assert report["jobs"]["acknowledged"] >= 80
    act = report["activity"]
    assert act["placements"] >= 50 and act["preemptions"] >= 5 and act["completions"] >= 20
    d = report["details"]
    assert d["no_lost_job"]["checked"] == report["jobs"]["acknowledged"]
    assert d["verify_zero_mismatches"]["checked"] > 100
    # the projection holds everything published until the load stopped and the cluster settled
    # (members finishing while the cluster stops may publish after the projector's last commit)
    pj = d["projection_equals_rebuild"]
    assert 0 < pj["settled_seq"] <= pj["last_seq"] <= pj["log_last_seq"], pj
    # and the supervisor brought back what the faults killed
    assert sum(report["restarts"].values()) >= sum(
        f["kind"] in ("kill9", "restart") for f in done if f["target_kind"] != "nats"
    )
    # nothing died that a fault did not kill (a NATS node's death or pause crashes no process)
    assert report["unplanned_restarts"] == {}, report["restarts"]
    # what it printed: each fault and each invariant's verdict
    text = run.stdout
    assert text.count("fault ") >= 20 and text.count("PASS") == 6 and "FAIL" not in text
