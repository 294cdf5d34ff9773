"""Live MIG re-geometry (issue 16): every service its own OS process on a real nats-server
with authentication, one simulated agent per node. A job asks for a MIG profile no GPU's fixed
layout offers: the preemption service asks for a new layout on the idle GPU, the node's agent
applies it and reports `MigReconfigured`, and the job is placed on it. The recorded log then
verifies (every decision re-decided from its inputs gives the same events)."""

from __future__ import annotations

import pytest
import yaml

from gpuledger import events as ev
from gpuledger.replay.scenario import load
from tests.integration.cluster import Processes
from tests.integration.test_walking_skeleton import assert_exports_and_verifies, run_scenario

pytestmark = pytest.mark.integration

DOC = {
    "name": "live-mig-regeometry",
    "cluster": {
        "nodes": [
            {
                "name": "m1",
                "gpus": 2,
                "model": "H100-80GB",
                "sharing": "mig",
                "mig_layout": ["1g.10gb"] * 7,
            }
        ]
    },
    "tenants": [{"name": "serving", "guaranteed": 2}],
    "policy": {"mig_regeometry": True, "mig_regeometry_window_s": 3600},
    "timeline": [
        {"at": 0, "submit": {"id": "r1", "tenant": "serving", "mig": "1g.10gb", "duration": "3s"}},
        {"at": 1, "submit": {"id": "big", "tenant": "serving", "mig": "3g.40gb", "duration": "2s"}},
    ],
}


async def test_an_idle_gpu_is_repartitioned_live_and_the_job_runs(server, bus, tmp_path):
    path = tmp_path / "mig.yaml"
    path.write_text(yaml.safe_dump(DOC))
    procs = Processes(server, path, tmp_path)
    try:
        ledger, log = await run_scenario(bus, procs, load(path), timeout=40)
    finally:
        procs.stop()
    events = [e for _, _, e in log]
    assert ledger.jobs["big"].state == "completed" and ledger.jobs["r1"].state == "completed", (
        procs.logs()
    )
    (req,) = [e for e in events if isinstance(e, ev.MigReconfigurationRequested)]
    (done,) = [e for e in events if isinstance(e, ev.MigReconfigured)]
    assert (req.job_id, req.node) == ("big", "m1") and req.gpu_index != ledger.allocations[
        "r1#1"
    ].members[0].gpus[0]
    assert (done.node, done.gpu_index, done.layout, done.causation_id) == (
        "m1",
        req.gpu_index,
        req.layout,
        req.event_id,
    )
    assert done.producer.startswith("node-agent")
    (placed,) = [e for e in events if isinstance(e, ev.GangPlaced) and e.job_id == "big"]
    assert [(m.node, m.gpus, m.mig_profile) for m in placed.members] == [
        ("m1", (req.gpu_index,), "3g.40gb")
    ]
    assert events.index(done) < events.index(placed)
    assert_exports_and_verifies(server.url, tmp_path / "log.jsonl")
