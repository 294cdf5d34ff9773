"""compose.yaml stays consistent with the code: every service runs a real role with the
configuration file it names, and NATS runs the production durability profile."""

from pathlib import Path

import yaml

from gpuledger.services.domain.inputs.configfile import node_infos
from gpuledger.services.roles import ROLES

ROOT = Path(__file__).resolve().parents[1]


def test_every_compose_service_runs_a_known_role_on_a_declared_node():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    cluster = yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())
    nodes = {n.name for n in node_infos(cluster)}
    runs = [
        s["command"] for s in compose["services"].values() if s.get("command", [None])[0] == "run"
    ]
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


def _cluster_profile(compose):
    return {
        name: svc
        for name, svc in compose["services"].items()
        if "cluster" in svc.get("profiles", [])
    }


def test_the_cluster_profile_runs_three_routed_nats_nodes_with_their_own_stores():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    nodes = _cluster_profile(compose)
    assert sorted(nodes) == ["nats-1", "nats-2", "nats-3"]
    stores, names = set(), set()
    for svc in nodes.values():
        assert svc["image"].startswith("nats:")
        cmd = svc["command"]
        assert cmd[cmd.index("-c") + 1] == "/etc/nats/nats.conf"
        names.add(cmd[cmd.index("--name") + 1])
        assert "./deploy/nats-cluster.conf:/etc/nats/nats.conf:ro" in svc["volumes"]
        assert "auth:/etc/nats/auth:ro" in svc["volumes"]  # the same generated identities
        data = [v for v in svc["volumes"] if v.endswith(":/data")]
        assert len(data) == 1 and data[0].split(":")[0] in compose["volumes"]
        stores.add(data[0])
        assert svc["depends_on"]["auth"]["condition"] == "service_completed_successfully"
    assert names == set(nodes) and len(stores) == 3
    # the single-node default is untouched: `docker compose up` starts `nats` alone
    assert "profiles" not in compose["services"]["nats"]
    assert "./deploy/nats.conf:/etc/nats/nats.conf:ro" in compose["services"]["nats"]["volumes"]


def test_cluster_nodes_fsync_and_authenticate_clients_and_routes():
    conf = (ROOT / "deploy" / "nats-cluster.conf").read_text()
    assert "sync_interval: always" in conf
    assert "include auth/auth.conf" in conf and "include auth/cluster.conf" in conf
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    auth_cmd = " ".join(compose["services"]["auth"]["command"])
    routes = auth_cmd.split("--cluster-routes ", 1)[1].split()[0].split(",")
    assert routes == [f"{n}:6222" for n in sorted(_cluster_profile(compose))]


def test_the_cluster_env_points_every_service_at_all_nodes_with_three_replicas():
    env = dict(
        line.split("=", 1)
        for line in (ROOT / "deploy" / "cluster.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert env["COMPOSE_PROFILES"] == "cluster"
    assert env["GPULEDGER_NATS_URL"].split(",") == [f"nats://nats-{i}:4222" for i in (1, 2, 3)]
    assert env["GPULEDGER_STREAM_REPLICAS"] == "3"
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    url = compose["x-gpuledger"]["environment"]["GPULEDGER_NATS_URL"]
    assert url == "${GPULEDGER_NATS_URL:-nats://nats:4222}"  # single node unless the env says
    config = compose["services"]["config"]
    cmd = config["command"]
    assert cmd[:2] == ["apply", "/config/cluster.yaml"]
    assert cmd[cmd.index("--replicas") + 1] == "${GPULEDGER_STREAM_REPLICAS:-1}"
    # config waits for whichever servers the active profile starts
    assert {"nats", "nats-1", "nats-2", "nats-3"} <= set(config["depends_on"])
    assert all(d.get("required") is False for d in config["depends_on"].values())


def test_the_cluster_node_config_is_valid_for_nats_server(tmp_path):
    import subprocess

    import pytest

    from gpuledger.services.runtime.auth import init
    from gpuledger.services.runtime.nats_server import NatsServerNotFound, find_nats_server

    try:
        binary = find_nats_server()
    except NatsServerNotFound:
        pytest.skip("no nats-server binary")
    (tmp_path / "nats.conf").write_text((ROOT / "deploy" / "nats-cluster.conf").read_text())
    d = init(tmp_path / "auth", cluster_routes=["nats-1:6222", "nats-2:6222", "nats-3:6222"])
    cluster = (d.path / "cluster.conf").read_text()
    assert "authorization" in cluster and d.route_password() in cluster
    assert (d.path / "cluster.conf").stat().st_mode & 0o077 == 0  # holds the route secret
    out = subprocess.run(
        [str(binary), "-t", "-c", str(tmp_path / "nats.conf"), "--name", "nats-1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0 and "is valid" in out.stdout + out.stderr, out.stdout + out.stderr


def test_every_compose_service_serves_metrics_that_prometheus_scrapes():
    # Given the compose file and the shipped Prometheus configuration
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    prom = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {
        t for job in prom["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    }
    # then every service (not an optional standby) serves /metrics on every interface and is scraped
    for name, svc in compose["services"].items():
        cmd = svc.get("command", [])
        if cmd[:1] != ["run"] or svc.get("profiles"):
            continue
        port = cmd[cmd.index("--metrics-port") + 1]
        assert cmd[cmd.index("--metrics-addr") + 1] == "0.0.0.0", name
        assert f"{name}:{port}" in targets, name
    assert compose["services"]["metrics"]["command"][0] == "metrics" and "metrics:9400" in targets
    assert prom["rule_files"] == ["rules.yaml"]


def test_the_projector_runs_and_its_data_directory_belongs_to_the_container_user():
    # Given the compose file and the Dockerfile its services are built from
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    docker = (ROOT / "Dockerfile").read_text()
    projector = compose["services"]["projector"]
    cmd = projector["command"]
    assert cmd[:2] == ["run", "projector"] and "profiles" not in projector  # started by default
    data = cmd[cmd.index("--data") + 1]
    volume = next(v for v in projector["volumes"] if v.endswith(":" + data))
    assert volume.split(":")[0] in compose["volumes"]  # a named volume, kept across restarts
    # the exporter reads the same projection
    assert f"{volume.split(':')[0]}:{data}:ro" in compose["services"]["metrics"]["volumes"]
    # then the image runs as a non-root user that owns that directory (a new named volume is
    # initialised from the image's directory, owner included)
    user = next(line.split()[1] for line in docker.splitlines() if line.startswith("USER "))
    assert user != "root"
    run = " ".join(
        line for line in docker.replace("\\\n", " ").splitlines() if line.startswith("RUN ")
    )
    assert f"mkdir -p {data}" in run and f"chown {user} {data}" in run
    assert run.index(f"useradd --system {user}") < run.index(f"chown {user} {data}")


def test_the_example_job_compose_names_is_a_valid_job_the_compose_cluster_runs():
    # compose.yaml tells you to submit /config/job.yaml (./deploy is mounted at /config)
    from gpuledger import events as ev
    from gpuledger.replay.scenario import from_document
    from gpuledger.replay.simulator import simulate
    from gpuledger.services.domain.inputs.jobfile import job_spec

    compose_text = (ROOT / "compose.yaml").read_text()
    assert "submit /config/job.yaml" in compose_text
    assert "./deploy:/config:ro" in yaml.safe_load(compose_text)["x-gpuledger"]["volumes"]
    doc = yaml.safe_load((ROOT / "deploy" / "job.yaml").read_text())
    spec = job_spec(doc)  # the parser `gpuledger submit` uses: raises on any bad key or unit
    assert spec.tenant in {
        t["name"] for t in yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())["tenants"]
    }
    assert "--creds /auth/ci-research.nk" in compose_text and spec.tenant == "research"
    # and on the compose cluster it is admitted, placed as a whole gang and completes
    scenario = yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())
    scenario["timeline"] = [{"at": 0, "submit": doc}]
    log = simulate(from_document(scenario)).log
    kinds = [type(e).__name__ for _, _, e in log if getattr(e, "job_id", None) == spec.job_id]
    assert kinds[:2] == ["JobAdmitted", "GangPlaced"] and "GangCompleted" in kinds
    placed = next(e for _, _, e in log if isinstance(e, ev.GangPlaced))
    assert len(placed.members) == spec.replicas
