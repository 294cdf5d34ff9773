"""`gpuledger up --metrics-port P` on a real (authenticated) nats-server: a job is submitted,
and the aggregate exporter (P) and the services' own endpoints (P+1...) answer `urllib` GETs
with the real numbers."""

import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests import waiting
from tests.integration.cluster import EXAMPLES, ROOT, cli

pytestmark = pytest.mark.integration


def free_ports(n: int) -> int:
    """A port P with P..P+n-1 free (best effort)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        try:
            for p in range(base, base + n):
                with socket.socket() as t:
                    t.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports")


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def matching(samples: dict, name: str, **labels) -> list[float]:
    return [
        v
        for (n, ls), v in samples.items()
        if n == name and all(dict(ls).get(k) == x for k, x in labels.items())
    ]


# a scrape of an endpoint that is not up yet is "not yet"
eventually = functools.partial(waiting.eventually, ignoring=(OSError,), interval_s=0.5)


@pytest.mark.parametrize("processes", [False, True], ids=["in-process", "processes"])
def test_up_serves_aggregate_and_service_metrics(tmp_path, processes):
    port = free_ports(12)
    args = ["up", "--config", str(EXAMPLES / "three-jobs.yaml"), "--metrics-port", str(port)]
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuledger.services.cli",
            *args,
            *(["--processes"] if processes else []),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "GPULEDGER_LOG_LEVEL": "warning"},
    )
    try:
        lines: list[str] = []
        while True:  # up prints every endpoint once its services are started
            line = up.stderr.readline()
            assert line, "up exited: " + "".join(lines)
            lines.append(line)
            if (
                line.startswith("metrics: ")
                and "aggregate" not in line
                and (not processes or "projector" in line)
            ):
                break
        endpoints = dict(re.findall(r"^metrics: (\S+) (\S+)$", "".join(lines), re.M))
        assert endpoints["aggregate"] == f"http://127.0.0.1:{port}/metrics"
        if processes:  # one port per child: the control plane, each node, the projector
            assert {
                "admission",
                "quota",
                "scheduler",
                "preemption",
                "n1",
                "n2",
                "projector",
            } <= set(endpoints)
            assert endpoints["admission"] == f"http://127.0.0.1:{port + 1}/metrics"
        else:
            assert endpoints["services"] == f"http://127.0.0.1:{port + 1}/metrics"
        # and every endpoint is a Prometheus file_sd target in the data dir (issue 32)
        targets = json.loads((tmp_path / ".gpuledger" / "prometheus-targets.json").read_text())
        listed = {g["labels"]["gpuledger_endpoint"]: g for g in targets}
        assert set(listed) == set(endpoints)
        for name, url in endpoints.items():
            assert f"http://{listed[name]['targets'][0]}/metrics" == url
            job = "gpuledger-cluster" if name == "aggregate" else "gpuledger-services"
            assert listed[name]["labels"]["job"] == job
        promtool_accepts_file_sd(tmp_path / ".gpuledger" / "prometheus-targets.json", tmp_path)

        (tmp_path / "hold.yaml").write_text(
            "id: hold\ntenant: team-a\ngpus: 4\nreplicas: 2\nduration: 600\n"
        )
        (tmp_path / "wait.yaml").write_text("id: wait\ntenant: team-a\ngpus: 4\nduration: 1\n")
        for f in ("hold.yaml", "wait.yaml"):
            r = cli("submit", f, "--wait", cwd=tmp_path)
            assert r.returncode == 0, r.stderr

        agg = endpoints["aggregate"]

        def pending_and_admitted():
            s = scrape(agg)
            pending = sum(matching(s, "gpuledger_pending_workloads", tenant="team-a"))
            admitted = sum(matching(s, "gpuledger_admitted_workloads_total", tenant="team-a"))
            allocated = sum(matching(s, "gpuledger_gpus_allocated"))
            return s if (pending, admitted, allocated) == (1, 2, 8) else None

        s = eventually(pending_and_admitted, what="1 pending, 2 admitted, 8 GPUs allocated")
        assert matching(s, "gpuledger_exporter_up") == [1]
        assert sum(matching(s, "gpuledger_gpus", modelName="A100-80GB")) == 8
        assert matching(s, "gpuledger_tenant_quota_used_gpus", tenant="team-a") == [8]
        assert matching(s, "gpuledger_tenant_quota_nominal_gpus", tenant="team-a") == [8]
        assert matching(s, "gpuledger_pending_workloads", tenant="team-a", reason="Resources") == [
            1
        ]
        assert not any(v == "hold" or v == "wait" for _, ls in s for _, v in ls)

        service_urls = [u for n, u in endpoints.items() if n != "aggregate"]

        def caught_up():
            rows = {}
            for u in service_urls:
                svc = scrape(u)
                for (n, ls), v in svc.items():
                    if n == "gpuledger_service_fold_lag_messages":
                        rows[(dict(ls)["service"], dict(ls)["node"])] = (v, svc)
            lags = {k: v for k, (v, _) in rows.items()}
            wanted = {"admission", "quota", "scheduler", "preemption", "node-agent", "projector"}
            if wanted <= {k[0] for k in rows} and all(v == 0 for v in lags.values()):
                return rows
            return None

        rows = eventually(caught_up, what="every service's fold lag 0")
        _, svc = rows[("admission", "")]
        assert (
            matching(svc, "gpuledger_service_events_published_total", service="admission")[0] >= 2
        )
        assert (
            matching(svc, "gpuledger_service_decide_duration_seconds_count", service="admission")[0]
            >= 1
        )
        assert matching(svc, "gpuledger_service_leader", service="admission") == [1]
        _, sched = rows[("scheduler", "")]
        assert matching(sched, "gpuledger_service_decisions_total", service="scheduler")[0] >= 1
        assert matching(sched, "gpuledger_service_folded_seq", service="scheduler")[0] > 0
    finally:
        up.terminate()
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:
            up.kill()
    assert up.returncode == 0
    assert not (tmp_path / ".gpuledger" / "prometheus-targets.json").exists()  # nothing to scrape


def promtool_accepts_file_sd(targets, tmp_path) -> None:
    """`promtool check config` of a configuration whose only job reads `targets` (file_sd);
    promtool reads and validates the target file too."""
    promtool = shutil.which("promtool")
    if promtool is None:
        return  # tests/deploy/test_observability.py fails CI without promtool
    config = tmp_path / "prometheus-file-sd.yml"
    config.write_text(
        "scrape_configs:\n"
        "  - job_name: gpuledger\n"
        f"    file_sd_configs: [{{files: ['{targets}']}}]\n"
    )
    done = subprocess.run(
        [promtool, "check", "config", str(config)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr
