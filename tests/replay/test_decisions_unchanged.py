"""Speed work must not change a decision: the logs of small fixed runs, byte for byte.

The digests below are sha256 of the JSONL logs written by main without the speed work of
issue 15 (b44e428, the main the speed branch was merged with). A change that alters a
decision on purpose updates them and says so in its commit.
Issue 36 changed the openb digests on purpose: imported pods assume no checkpoint, so every
`JobSubmitted` carries `checkpoint: {save_s: 2**40}`; every decision (type, job, time,
placements) of both fixture runs is the same as before.
`python tests/replay/test_decisions_unchanged.py` prints the current digests; for the full
openb trace, `gpuledger bench replay --trace DIR --baseline OTHER/.venv/bin/python` compares
the sha256 of both outputs (`same_output`).
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
OPENB = ROOT / "tests" / "fixtures" / "openb"

SCENARIOS = [
    "backfill",
    "consolidation",
    "day-night",
    "demo",
    "inference-burst",
    "latency-critical",
    "mig-regeometry",
    "preempt-batch",
    "runai-reclaim",
    "starving-gang",
    "thrashing",
    "usage-decay",
]

EXPECTED = {
    "scenario:backfill": "3f79a0b487f5e5d6aa7d996e76a6c088ab2b7b027d4e809080325d9d46e2474e",
    "scenario:consolidation": "33626c953ff2012e3e8cff7c3dd9749388ebb72531fb6e6574ba62715a80f9b9",
    # quota's schedule changes are on gl.quota.* (subjects only: with the old gl.admin.* subjects
    # put back the log is efb84586..., byte for byte as before)
    "scenario:day-night": "f68c497cd21f00dfb5d973d0fa6a7c0d1122f938c79fd93377a8fbac5005f51f",
    # demo: its `L40S` node registers as `L40S-48GB` (the GPU model vocabulary); with that name
    # written back the log is byte for byte the earlier one (11a09ac7...932f21)
    "scenario:demo": "962c230df712d541d9298cbf2a8fe306f609de610ef54c956df5ca52f3a72094",
    "scenario:inference-burst": "bc8cb4146d22feb21a5021b94951520c78e969a4e8cae6ca2af336a6268952ef",
    # issue 29 (on purpose, no decision changed): `urgent`, placed while `serve-2` waited, is
    # no longer listed as MinRuntime-excluded in the PreemptionRequested for `serve-2`
    "scenario:latency-critical": "535cfecc2f1a4f1c43574c8c1625d414b37911619774654ff2c1b9b268cbac28",
    "scenario:mig-regeometry": "e93fa8d66f6872348dfaa7c82a1890557eadadd955cd85d8e88ff9dd93da2243",
    "scenario:preempt-batch": "7bdead20138f72cf8379d298988cee5b444035b0273b7268494930127fd6128c",
    "scenario:runai-reclaim": "15456128aab2e05b3dba8b2e106b12a179f47186d69de04dae5f1390302dce52",
    "scenario:starving-gang": "07c01db53d9e53f67560258f80554667c0423400509bd143196f6b33f7eb372c",
    # issue 45 fix 4 (on purpose, no decision changed): the declines of burst-3 (2,760 s,
    # EvictionBudget) and burst-4 (4,500 s, NoVictims) replace another decline, so their ids
    # add it and the instant (a decline that came back used to repeat an id and be dropped);
    # with the old keys the log is 8276bd2d...1e0555df88
    "scenario:thrashing": "a3bd20908bb2fb900c60950995ff2dbc4e53609093731fd1e3c5cc4a64c35c72",
    "scenario:usage-decay": "6be700978e5bea08ebe57fa58b6304cae3b5e40a63f0a48b51a320ccffffa930",
    "openb:all": "98763159d94957e31e0f25ba68329e065d493ad64c288edf4294f5a5b6659fcb",
    "openb:6": "024029badb4bbf5624caa7bc4801b4cdf5dba662a2142a1050d3f414aadd0e0a",
}


def _digest(entries) -> str:
    from gpuledger.replay.logio import write_log

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "log.jsonl"
        write_log(path, entries)
        return hashlib.sha256(path.read_bytes()).hexdigest()


def scenario_digest(name: str) -> str:
    from gpuledger.replay.scenario import load
    from gpuledger.replay.simulator import simulate

    return _digest(simulate(load(EXAMPLES / f"{name}.yaml")).log)


def openb_digest(nodes: int | None) -> str:
    """The fixture slice of the openb trace imported and replayed, on its first `nodes` GPU
    nodes (all when None; few nodes make jobs wait, queue and be preempted)."""
    from gpuledger.replay.importers import import_openb
    from gpuledger.replay.whatif import external_inputs, replay

    node_csv = OPENB / "openb_node_list_gpu_node.csv"
    with tempfile.TemporaryDirectory() as d:
        if nodes is not None:
            lines = node_csv.read_text().splitlines(keepends=True)[: nodes + 1]
            node_csv = Path(d) / "nodes.csv"
            node_csv.write_text("".join(lines))
        imported = import_openb(OPENB / "openb_pod_list_default.csv", node_csv)
        return _digest(replay(external_inputs(imported.entries())).log)


def current() -> dict[str, str]:
    out = {f"scenario:{n}": scenario_digest(n) for n in SCENARIOS}
    out["openb:all"] = openb_digest(None)
    out["openb:6"] = openb_digest(6)
    return out


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_log_is_unchanged(name):
    assert scenario_digest(name) == EXPECTED[f"scenario:{name}"]


@pytest.mark.parametrize("nodes", [None, 6])
def test_openb_fixture_replay_is_unchanged(nodes):
    key = "openb:all" if nodes is None else f"openb:{nodes}"
    assert openb_digest(nodes) == EXPECTED[key]


if __name__ == "__main__":
    for k, v in current().items():
        sys.stdout.write(f'    "{k}": "{v}",\n')
