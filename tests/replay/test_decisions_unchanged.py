"""Speed work must not change a decision: the logs of small fixed runs, byte for byte.

The digests below are sha256 of the JSONL logs written by the code before the speed work
(issue 15). A change that alters a decision on purpose updates them and says so in its
commit. `python tests/replay/test_decisions_unchanged.py` prints the current digests; for the
full openb trace compare `gpuledger replay` outputs (`sha256sum`) before and after instead.
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

SCENARIOS = ["backfill", "day-night", "demo", "inference-burst", "latency-critical",
             "preempt-batch", "runai-reclaim", "starving-gang", "thrashing", "usage-decay"]

EXPECTED = {
    "scenario:backfill": "42c881dab3a1acd6ffd5be82507da75118f7b38652eaaf9dec932d298a909c1d",
    "scenario:day-night": "0ec3b10c44d288b1e5387111d085119940603fd32c75d5713173912a3b66ce0c",
    "scenario:demo": "ca4ff5372faeab2a665328eec9b039c1b7599ff0ca53b78b5f0c676488b07c83",
    "scenario:inference-burst": "e9b5f02cb959bd0b3e701e2f7a07cbd5c729a5826b183406a43ce3bda39e726b",
    "scenario:latency-critical": "57792bea2b79419c3043da024f4c4d721b76ed6b9ac8944cb3e57a58e9c93032",
    "scenario:preempt-batch": "141d7955b3e0448eb237430c2d43942fb1b5205511d9e572caffee9ff53b53b0",
    "scenario:runai-reclaim": "9934f69fa8a35efa591e04e40f704c826dbb0f518a8fde23d8258265773ed43a",
    "scenario:starving-gang": "67de7694e3a76bc09ad29904e9727ca6ae0c5f27522929cb4889c4e43059db29",
    "scenario:thrashing": "a555f7cdb627fbd62ff16971c20bed8c4131dd12e046c0668d1812f351c6f718",
    "scenario:usage-decay": "6f3f4c6a9dfc047b6b0cd7b166531951e55e39d91f72f8369c693bece0007b4a",
    "openb:all": "2b8e4c4466df07081a8abca79baacbb833e943ba589af6382ee692a821d0bd2f",
    "openb:6": "6c3697de5bdc82eb6e27171ba1c192083dc8023e294b8f81d6203875f76d7b04",
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
