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


def test_every_service_connects_as_its_own_identity():
    # Given the compose file and the identities its `auth` service generates
    from gpuledger.services.runtime.auth import file_name, principal_of

    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    auth_cmd = " ".join(compose["services"]["auth"]["command"])
    assert "gpuledger auth init /auth" in auth_cmd
    # then every service passes the credential of its own principal, never the operator's
    for name, svc in compose["services"].items():
        cmd = svc.get("command", [])
        if cmd[:1] != ["run"]:
            continue
        node = cmd[cmd.index("--node") + 1] if "--node" in cmd else None
        want = "/auth/" + file_name(principal_of(cmd[1], node))
        assert cmd[cmd.index("--creds") + 1] == want, name
        if node is not None:
            assert node in auth_cmd
    # and the server admits only generated identities
    conf = (ROOT / "deploy" / "nats.conf").read_text()
    assert "include auth/auth.conf" in conf
    assert "auth:/etc/nats/auth:ro" in compose["services"]["nats"]["volumes"]
