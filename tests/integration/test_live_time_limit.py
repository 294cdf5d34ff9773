"""Live: a time limit enforced end to end (issue 31). Every service is its own OS process on
a real nats-server, two real node agents run a 2x4 gang of examples/train_tiny.py with a 2 s
`time_limit`: the scheduler decides `TimeLimitReached`, both agents SIGTERM their member, the
members save and exit 75, and the job ends `timeout` (reason `TimeLimit`) at its saved step."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpuledger import events as ev
from tests.integration.test_live_agent import LiveCluster, run_scenario

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

DOC = {
    "name": "live-time-limit",
    "cluster": {
        "nodes": [
            {"name_prefix": "n", "count": 2, "gpus": 4, "model": "H100-80GB", "cpu": 64,
             "memory": "512Gi", "leaf_switch": "leaf-1"},
        ]
    },
    "tenants": [{"name": "ml", "guaranteed": 8}],
    "policy": {"default_grace_s": 5},
    "timeline": [
        {
            "at": 0,
            "submit": {
                "id": "capped",
                "tenant": "ml",
                "gpus": 4,
                "replicas": 2,
                "duration": "40s",
                "time_limit": "2s",
                "checkpoint": {"save": "1s"},
                "command": [sys.executable, str(ROOT / "examples" / "train_tiny.py"),
                            "--steps", "2000", "--step-time", "0.02"],
            },
        }
    ],
}  # fmt: skip


@pytest.fixture
def cluster(tmp_path):
    c = LiveCluster(tmp_path, DOC)
    c.server.start()
    yield c
    c.close()


async def test_a_live_gang_is_checkpointed_and_stopped_at_its_time_limit(cluster):
    ledger, log = await run_scenario(cluster)
    job = ledger.jobs["capped"]
    assert (str(job.state), job.reason) == ("timeout", "TimeLimit"), cluster.logs()
    (reached,) = [e for e in log if isinstance(e, ev.TimeLimitReached)]
    runs = [e for e in log if isinstance(e, ev.MemberStarted) and e.job_id == "capped"]
    assert reached.started_ms == max(e.occurred_at_ms for e in runs)
    assert reached.occurred_at_ms >= reached.started_ms + 2000
    exits = [e for e in log if isinstance(e, ev.MemberExited) and e.job_id == "capped"]
    assert sorted(e.rank for e in exits) == [0, 1]
    assert all(e.outcome == "preempted" and e.exit_code == 75 for e in exits)  # saved, exited
    assert all(e.occurred_at_ms < reached.deadline_ms for e in exits)  # before the kill
    acks = [e for e in log if isinstance(e, ev.MemberCheckpointed) and e.job_id == "capped"]
    step = min(max(e.step for e in acks if e.rank == r) for r in (0, 1))
    (failed,) = [e for e in log if isinstance(e, ev.GangFailed)]
    assert failed.reason == "TimeLimit" and f"checkpointed at step {step}" in failed.message
    assert step < 2000  # stopped long before its 40 s of steps
