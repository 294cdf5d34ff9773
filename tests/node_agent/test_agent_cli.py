"""`gpuledger nodes discover` over the fake NVML, and its error without NVML."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpuledger.services.cli.main import app
from gpuledger.services.node_agent import nvml_discovery
from tests.node_agent.test_agent import _NoNvml


def test_discover_prints_the_inventory_as_json_and_table(monkeypatch):
    from gpuledger.services.node_agent.nvml_discovery import DiscoveredGpu, HostInventory

    inv = HostInventory(
        "550.54",
        "12.4",
        (
            DiscoveredGpu(
                0,
                "GPU-x",
                "NVIDIA H100 80GB HBM3",
                "H100-80GB",
                81559,
                False,
                (),
                "h-nvl0",
                True,
                None,
            ),
        ),
    )
    monkeypatch.setattr(nvml_discovery, "discover", lambda nvml=None, host=None: inv)
    out = CliRunner().invoke(app, ["nodes", "discover", "-o", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["gpus"][0]["model"] == "H100-80GB"
    out = CliRunner().invoke(app, ["nodes", "discover"])
    assert "H100-80GB" in out.output and "GPU-x" in out.output


def test_discover_without_nvml_fails_with_the_reason(monkeypatch):
    real = nvml_discovery.discover
    monkeypatch.setattr(
        nvml_discovery, "discover", lambda nvml=None, host=None: real(_NoNvml(), host=host)
    )
    out = CliRunner().invoke(app, ["nodes", "discover"])
    assert out.exit_code == 3 and "NVML could not be initialised" in out.output
