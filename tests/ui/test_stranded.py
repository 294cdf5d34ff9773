"""Issue 32: stranded capacity is defined against pending work. Given an idle cluster (nodes
registered, no job pending), when the cluster page and the exporter show fragmentation, then
nothing is called stranded: the page says "no pending work" (it said 100 %), the exporter
reports 0; with pending jobs the numbers stay what the fragmentation view says."""

from __future__ import annotations

import warnings

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuledger import events as ev
from gpuledger.projections.exporter import ProjectionCollector
from gpuledger.projections.store import connect_readonly, rebuild
from gpuledger.projections.ui.app import create_app
from gpuledger.services.runtime.metrics import new_registry
from tests.projections import scenario

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


def project(messages, path):
    rebuild(messages, path)
    return path


@pytest.fixture(scope="module")
def idle(tmp_path_factory):
    """The scenario's cluster before its first job: every GPU free, nothing pending."""
    messages = scenario.build()
    first_job = next(i for i, m in enumerate(messages) if isinstance(m[2], ev.JobSubmitted))
    return project(messages[:first_job], tmp_path_factory.mktemp("idle") / "p.duckdb")


@pytest.fixture(scope="module")
def busy(tmp_path_factory):
    return project(scenario.build(), tmp_path_factory.mktemp("busy") / "p.duckdb")


def fragmentation_rows(html: str) -> list[str]:
    table = html.split('id="fragmentation"', 1)[1].split("</table>", 1)[0]
    return table.split("<tr>")[2:]  # after the header row


def stranded_samples(path) -> list[float]:
    text = generate_latest(new_registry(ProjectionCollector(path))).decode()
    return [
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "gpuledger_stranded_gpus"
    ]


def test_an_idle_cluster_has_no_stranded_capacity_but_no_pending_work(idle):
    con = connect_readonly(idle)
    free, pending = con.execute(
        "SELECT free_gpus, pending_jobs FROM fragmentation WHERE node = '*'"
    ).fetchone()
    con.close()
    assert free > 0 and pending == 0  # the view alone would call every free GPU stranded
    page = TestClient(create_app(idle), base_url="http://127.0.0.1").get("/cluster").text
    rows = fragmentation_rows(page)
    assert rows and all("no pending work" in r for r in rows)
    assert "100%" not in "".join(rows)
    assert stranded_samples(idle) and set(stranded_samples(idle)) == {0.0}


def test_with_pending_jobs_the_stranded_numbers_are_the_views(busy):
    con = connect_readonly(busy)
    view = con.execute(
        "SELECT stranded_gpus, stranded_ratio, pending_jobs FROM fragmentation WHERE node = '*'"
    ).fetchone()
    per_clique = [
        v
        for (v,) in con.execute(
            "SELECT stranded_gpu_equiv FROM fragmentation WHERE node <> '*' ORDER BY node, clique"
        ).fetchall()
    ]
    con.close()
    assert view[2] > 0
    page = TestClient(create_app(busy), base_url="http://127.0.0.1").get("/cluster").text
    total = fragmentation_rows(page)[-1]
    assert "no pending work" not in page
    assert f"<td>{view[0]}</td><td>{view[1]:.0%}</td>" in total
    assert sorted(stranded_samples(busy)) == sorted(float(v) for v in per_clique)
