"""The shipped observability files: docs/metrics.md is generated from the code, the alert
rules pass their promtool unit tests, and the rules and the Grafana dashboard name only
metrics that exist."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuledger.projections.exporter import render_docs

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"
RULE_TESTS = PROM / "tests" / "rules_test.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "gpuledger.json"
DOCS = ROOT / "docs" / "metrics.md"


def test_docs_metrics_md_is_generated_from_the_code():
    assert DOCS.read_text() == render_docs(), (
        "docs/metrics.md is stale: run `gpuledger metrics --docs > docs/metrics.md`"
    )


def test_the_cli_prints_the_same_docs():
    out = subprocess.run(
        [sys.executable, "-m", "gpuledger.services.cli", "metrics", "--docs"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert out.stdout == DOCS.read_text()


def documented() -> set[str]:
    """Every series name docs/metrics.md allows (histograms: _bucket, _count, _sum)."""
    names = set()
    for name, kind in re.findall(r"^\| `(gpuledger_\w+)` \| (\w+) \|", DOCS.read_text(), re.M):
        names.add(name)
        if kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"}
    return names


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bgpuledger_\w+", expr))


def rule_exprs() -> list[str]:
    doc = yaml.safe_load((PROM / "rules.yaml").read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def test_rules_and_dashboard_name_only_documented_metrics():
    known = documented()
    assert len(known) > 40
    exprs = rule_exprs() + dashboard_exprs()
    assert len(exprs) >= 20
    for expr in exprs:
        # Prometheus's own `up` of a gpuledger scrape job (the endpoint-down alerts), or ours
        assert metric_names(expr) or re.search(r'\bup\{job="gpuledger-', expr), expr
        assert metric_names(expr) <= known, (expr, metric_names(expr) - known)


def test_the_alerts_the_seeds_ask_for_exist():
    doc = yaml.safe_load((PROM / "rules.yaml").read_text())
    alerts = {r["alert"] for g in doc["groups"] for r in g["rules"]}
    assert {
        "InferencePending",
        "HighPreemptionRate",
        "IdleAllocatedGPUs",
        "QuotaReclaimStarved",
        "EvictionBudgetExhausted",
        "DeadLetters",
        "FoldLag",
        "GpuledgerServiceDown",
        "GpuledgerNoLeader",
        "GpuledgerExporterDown",
    } <= alerts
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    for alert in alerts:  # a firing and a non-firing case for each
        cases = [c for t in tests for c in t["alert_rule_test"] if c["alertname"] == alert]
        assert any(c["exp_alerts"] for c in cases), alert
        assert any(not c["exp_alerts"] for c in cases), alert


def test_promtool_passes_the_rule_unit_tests():
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("promtool is missing in CI: .ci/run installs Debian's `prometheus` package")
        pytest.skip("promtool not installed (apt-get install prometheus); CI runs this test")
    # every YAML file a `rule_files: [deploy/prometheus/*.yaml]` glob takes is a rules file
    globbed = sorted(str(p.relative_to(PROM)) for p in PROM.glob("*.yaml"))
    assert globbed == ["rules.yaml"]
    check = subprocess.run(
        [promtool, "check", "rules", *globbed], cwd=PROM, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS.relative_to(PROM))],
        cwd=PROM,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout + run.stderr
    config = subprocess.run(
        [promtool, "check", "config", "prometheus.yml"], cwd=PROM, capture_output=True, text=True
    )  # the compose scrape configuration
    assert config.returncode == 0, config.stdout + config.stderr
