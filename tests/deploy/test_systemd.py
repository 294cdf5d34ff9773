"""deploy/systemd/: unit files for the control-plane services, the projector and the node agent.
Each one parses, has what a long-running service needs, and starts a real `gpuledger`
subcommand with flags that command has; `systemd-analyze verify` accepts it where available."""

from __future__ import annotations

import configparser
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import typer

from gpuledger.services.cli.main import app
from gpuledger.services.roles import CONTROL_PLANE

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
BINARY = "/usr/local/bin/gpuledger"


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # systemd keys are case-sensitive
    parser.read_string((UNITS / name).read_text())
    return parser


def command_options(*path: str) -> set[str]:
    """Every option name of `gpuledger PATH...` (from the CLI itself)."""
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return {opt for p in cmd.params for opt in getattr(p, "opts", [])}


def exec_start(u: configparser.ConfigParser) -> list[str]:
    return shlex.split(u["Service"]["ExecStart"])


@pytest.mark.parametrize(
    "name", ["gpuledger@.service", "gpuledger-projector.service", "gpuledger-node-agent.service"]
)
def test_every_unit_runs_a_real_gpuledger_command_and_restarts(name):
    u = unit(name)
    assert u["Unit"]["Description"]
    svc = u["Service"]
    assert svc["Restart"] == "always" and float(svc["RestartSec"]) > 0
    assert svc["User"] == "gpuledger"  # never root
    assert svc["EnvironmentFile"] == "/etc/gpuledger/gpuledger.env"
    assert u["Install"]["WantedBy"] == "multi-user.target"
    argv = exec_start(u)
    assert argv[0] == BINARY and argv[1] == "run"
    options = command_options("run")
    flags = [a for a in argv[2:] if a.startswith("--")]
    assert flags and set(flags) <= options, set(flags) - options
    # authentication is on: every unit connects with a credential of its own identity
    creds = Path(argv[argv.index("--creds") + 1])
    assert creds.parent == Path("/etc/gpuledger/auth") and creds.suffix == ".nk"


def test_the_service_template_names_its_role_and_credential_by_instance():
    argv = exec_start(unit("gpuledger@.service"))
    assert argv[2] == "%i" and argv[argv.index("--creds") + 1] == "/etc/gpuledger/auth/%i.nk"
    # the instances the header tells you to enable are exactly the control plane
    header = (UNITS / "gpuledger@.service").read_text().split("[Unit]")[0]
    enabled = {w.split("@", 1)[1] for w in header.split() if w.startswith("gpuledger@")}
    assert enabled == set(CONTROL_PLANE)


def test_the_projector_writes_its_projection_in_its_state_directory():
    u = unit("gpuledger-projector.service")
    argv = exec_start(u)
    assert argv[2] == "projector"
    assert u["Service"]["StateDirectory"] == "gpuledger"
    assert argv[argv.index("--data") + 1] == "/var/lib/gpuledger"


def test_stopping_the_node_agent_leaves_its_members_running():
    # docs/node-agent.md: members run in their own session and survive the agent's restart
    u = unit("gpuledger-node-agent.service")
    assert u["Service"]["KillMode"] == "process"
    argv = exec_start(u)
    assert argv[2] == "node-agent" and "--real" in argv
    node = argv[argv.index("--node") + 1]
    from gpuledger.services.runtime.auth import file_name, principal_of

    assert node == "%l"  # the host's short name, expanded by systemd
    want = file_name(principal_of("node-agent", "gpu-host-7")).replace("gpu-host-7", "%l")
    assert argv[argv.index("--creds") + 1] == "/etc/gpuledger/auth/" + want
    assert argv[argv.index("--work-dir") + 1].startswith("/var/lib/gpuledger/")
    assert "KillMode=process" in (ROOT / "docs" / "node-agent.md").read_text()


def environment() -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in (UNITS / "gpuledger.env").read_text().splitlines()
        if line and not line.startswith("#")
    )


def test_the_environment_file_names_the_nats_servers():
    assert environment()["GPULEDGER_NATS_URL"].startswith("nats://")


def expand(arg: str, instance: str) -> str:
    """An ExecStart argument as systemd runs it: `%i` (the instance), then `${VAR}` from the
    environment file (KeyError when the file does not define it)."""
    env = environment()
    arg = arg.replace("%i", instance)
    return re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], arg)


RUN_UNITS = [
    *((f"gpuledger@{role}", "gpuledger@.service", role) for role in CONTROL_PLANE),
    ("gpuledger-projector", "gpuledger-projector.service", ""),
    ("gpuledger-node-agent", "gpuledger-node-agent.service", ""),
]


def test_every_service_unit_serves_its_metrics_on_a_port_of_its_own():
    ports = {}
    for name, file, instance in RUN_UNITS:
        argv = [expand(a, instance) for a in exec_start(unit(file))]
        assert "--metrics-port" in argv and "--metrics-addr" in argv, name
        ports[name] = int(argv[argv.index("--metrics-port") + 1])
        assert argv[argv.index("--metrics-addr") + 1] == environment()["GPULEDGER_METRICS_ADDR"]
    exporter = [expand(a, "") for a in exec_start(unit("gpuledger-exporter.service"))]
    ports["gpuledger-exporter"] = int(exporter[exporter.index("--port") + 1])
    assert len(set(ports.values())) == len(ports), ports  # one host may run them all
    assert ports["gpuledger-exporter"] == 9400  # deploy/prometheus/prometheus.yml's port


@pytest.mark.parametrize(
    "name, command, creds",
    [
        ("gpuledger-exporter.service", ["metrics"], None),
        ("gpuledger-ui.service", ["ui"], None),
        ("gpuledger-gateway.service", ["gateway"], "/etc/gpuledger/auth/gateway.nk"),
    ],
)
def test_the_exporter_ui_and_gateway_units_run_their_command_like_the_services(
    name, command, creds
):
    u = unit(name)
    assert u["Unit"]["Description"]
    svc = u["Service"]
    assert svc["Restart"] == "always" and float(svc["RestartSec"]) > 0
    assert svc["User"] == "gpuledger"
    assert svc["EnvironmentFile"] == "/etc/gpuledger/gpuledger.env"
    assert u["Install"]["WantedBy"] == "multi-user.target"
    argv = [expand(a, "") for a in exec_start(u)]
    assert argv[0] == BINARY and argv[1 : 1 + len(command)] == command
    options = command_options(*command)
    flags = [a for a in argv[1 + len(command) :] if a.startswith("--")]
    assert flags and set(flags) <= options, set(flags) - options
    if creds is not None:
        assert argv[argv.index("--creds") + 1] == creds
    if "--data" in argv:  # the projection the projector writes
        assert argv[argv.index("--data") + 1] == "/var/lib/gpuledger"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
@pytest.mark.parametrize(
    "name, as_name",
    [
        ("gpuledger@.service", "gpuledger@scheduler.service"),
        ("gpuledger-projector.service", "gpuledger-projector.service"),
        ("gpuledger-node-agent.service", "gpuledger-node-agent.service"),
        ("gpuledger-exporter.service", "gpuledger-exporter.service"),
        ("gpuledger-ui.service", "gpuledger-ui.service"),
        ("gpuledger-gateway.service", "gpuledger-gateway.service"),
    ],
)
def test_systemd_analyze_verifies_each_unit(tmp_path, name, as_name):
    # the installed console script stands in for /usr/local/bin/gpuledger (verify checks
    # that the command is executable)
    binary = shutil.which("gpuledger") or str(
        Path(__import__("sys").executable).with_name("gpuledger")
    )
    assert Path(binary).exists()
    text = (UNITS / name).read_text().replace(BINARY, binary)
    (tmp_path / as_name).write_text(text)
    out = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / as_name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
