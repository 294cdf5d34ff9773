"""Fixtures shared by the replay tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuledger.replay.logio import write_log
from gpuledger.replay.scenario import load as load_scenario
from gpuledger.replay.simulator import simulate

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory) -> Path:
    """examples/demo.yaml simulated, its log written as JSONL (once per module)."""
    log = tmp_path_factory.mktemp("demo") / "demo.jsonl"
    write_log(log, simulate(load_scenario(ROOT / "examples" / "demo.yaml")).log)
    return log
