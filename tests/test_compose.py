"""compose.yaml stays consistent with the code: every service runs a real role with the
configuration file it names, and NATS runs the production durability profile."""

from pathlib import Path

import yaml

from gpuledger.services.domain.configfile import node_infos
from gpuledger.services.roles import ROLES

ROOT = Path(__file__).resolve().parents[1]


def test_every_compose_service_runs_a_known_role_on_a_declared_node():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    cluster = yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())
    nodes = {n.name for n in node_infos(cluster)}
    runs = [s["command"] for s in compose["services"].values() if s.get("command", [None])[0] == "run"]
    assert {c[1] for c in runs} >= set(ROLES)
    for command in runs:
        if "--node" in command:
            assert command[command.index("--node") + 1] in nodes


def test_nats_fsyncs_before_acknowledging():
    conf = (ROOT / "deploy" / "nats.conf").read_text()
    assert "sync_interval: always" in conf
