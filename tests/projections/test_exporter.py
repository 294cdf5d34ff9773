"""The aggregate exporter's numbers on the hand-built scenario (tests/projections/scenario.py),
through a real Prometheus registry and its text exposition."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuledger.projections.exporter import AGGREGATE_METRICS, ProjectionCollector
from gpuledger.projections.store import rebuild
from gpuledger.services.runtime.metrics import new_registry
from tests.projections.givens import TENANTS_WITH_LIMITS, config_log


@pytest.fixture(scope="module")
def scraped(tmp_path_factory, messages):
    db = tmp_path_factory.mktemp("exporter") / "p.duckdb"
    rebuild(messages, db)
    return scrape(db)


def scrape(db):
    """The exporter's scrape of the projection `db`: its text, and every sample's value by
    (name, sorted labels)."""
    text = generate_latest(new_registry(ProjectionCollector(db))).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    return text, samples


def value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


def test_pending_workloads_by_tenant_class_and_reason(scraped):
    _, s = scraped
    assert (
        value(
            s,
            "gpuledger_pending_workloads",
            tenant="org/b",
            priority_class="train",
            slo_class="batch",
            reason="Resources",
        )
        == 2
    )
    # big-b pending since 611 s; train-b requeued at 606 s; the projection's clock is 1260 s
    assert (
        value(
            s,
            "gpuledger_pending_workload_oldest_age_seconds",
            tenant="org/b",
            priority_class="train",
            slo_class="batch",
        )
        == 654.0
    )
    assert not [
        k for k in s if k[0] == "gpuledger_pending_workloads" and dict(k[1])["tenant"] == "org/a"
    ]


def test_placement_wait_histogram_by_class(scraped):
    _, s = scraped
    # batch waits 1, 2, 4 s (big-b never placed); latency-critical: infer-a 17 s
    assert (
        value(s, "gpuledger_placement_wait_time_seconds_bucket", slo_class="batch", le="1.0") == 1
    )
    assert (
        value(s, "gpuledger_placement_wait_time_seconds_bucket", slo_class="batch", le="5.0") == 3
    )
    assert value(s, "gpuledger_placement_wait_time_seconds_count", slo_class="batch") == 3
    assert value(s, "gpuledger_placement_wait_time_seconds_sum", slo_class="batch") == 7.0
    assert (
        value(
            s,
            "gpuledger_placement_wait_time_seconds_bucket",
            slo_class="latency-critical",
            le="10.0",
        )
        == 0
    )
    assert (
        value(s, "gpuledger_placement_wait_time_seconds_sum", slo_class="latency-critical") == 17.0
    )


def test_admission_wait_histogram_measures_submission_to_admission_not_to_placement(scraped):
    _, s = scraped
    # batch admitted after 0, 0.1, 1, 1 s (big-b too: admitted, never placed);
    # latency-critical: infer-a admitted at once (placed only after 17 s)
    name = "gpuledger_admission_wait_time_seconds"
    assert value(s, f"{name}_count", slo_class="batch") == 4
    assert value(s, f"{name}_bucket", slo_class="batch", le="1.0") == 4
    assert value(s, f"{name}_sum", slo_class="batch") == pytest.approx(2.1)
    assert value(s, f"{name}_bucket", slo_class="latency-critical", le="1.0") == 1
    assert value(s, f"{name}_sum", slo_class="latency-critical") == 0.0


def test_admitted_rejected_evicted_preempted_totals(scraped):
    _, s = scraped
    assert (
        value(s, "gpuledger_admitted_workloads_total", tenant="org/a", priority_class="inference")
        == 1
    )
    assert (
        value(s, "gpuledger_admitted_workloads_total", tenant="org/b", priority_class="train") == 2
    )
    assert (
        value(
            s, "gpuledger_rejected_workloads_total", tenant="org/a", reason="UnknownPriorityClass"
        )
        == 1
    )
    labels = {"tenant": "org/b", "priority_class": "train", "reason": "Reclaim"}
    assert value(s, "gpuledger_evicted_workloads_total", **labels) == 1
    assert value(s, "gpuledger_preempted_workloads_total", **labels) == 1
    assert value(s, "gpuledger_preemption_lost_gpu_seconds_total", **labels) == 40.0
    assert value(s, "gpuledger_preemptions_declined_total", reason="NoVictims") == 1
    assert value(s, "gpuledger_checkpoint_duration_seconds_sum") == 5.0
    assert value(s, "gpuledger_checkpoint_duration_seconds_bucket", le="2.0") == 0
    assert value(s, "gpuledger_checkpoint_duration_seconds_bucket", le="5.0") == 1
    assert value(s, "gpuledger_preemptions_uncheckpointed_total") == 0
    assert value(s, "gpuledger_dead_letters_total") == 0


def test_quota_per_tenant(scraped):
    _, s = scraped
    assert value(s, "gpuledger_tenant_quota_nominal_gpus", tenant="org/a") == 8
    assert value(s, "gpuledger_tenant_quota_nominal_gpus", tenant="org/b") == 4
    assert value(s, "gpuledger_tenant_quota_limit_gpus", tenant="org/b") == 16
    assert ("gpuledger_tenant_quota_limit_gpus", (("tenant", "org/a"),)) not in s
    # org/a holds infer-a's 8 GPUs and mig-a's 1g slice (1/7 of an A100, 143 milli)
    assert value(s, "gpuledger_tenant_quota_used_gpus", tenant="org/a") == 8.143
    assert value(s, "gpuledger_tenant_quota_borrowed_gpus", tenant="org/a") == pytest.approx(0.143)
    assert value(s, "gpuledger_tenant_quota_used_gpus", tenant="org/b") == 0
    assert value(s, "gpuledger_tenant_demand_gpus", tenant="org/b") == 24


def test_gpus_allocated_vs_sm_active_and_idle(scraped):
    _, s = scraped
    n1 = {"hostname": "n1", "modelName": "H100-80GB"}
    assert value(s, "gpuledger_gpus", **n1) == 8
    assert value(s, "gpuledger_gpus_allocated", **n1) == 8
    assert value(s, "gpuledger_gpus_sm_active", **n1) == pytest.approx(1.6)  # 8 x 20 %
    assert value(s, "gpuledger_idle_allocated_gpus", **n1) == pytest.approx(6.4)
    assert value(s, "gpuledger_tenant_idle_allocated_gpus", tenant="org/a") == pytest.approx(6.4)
    assert value(s, "gpuledger_gpus_allocated", hostname="n3", modelName="A100-80GB") == 0.143


def test_fragmentation_per_clique(scraped):
    _, s = scraped
    for clique in ("n2-nvl0", "n2-nvl1"):  # 4 free each, useless to 8-GPU gangs
        assert value(s, "gpuledger_free_gpus", hostname="n2", clique=clique) == 4
        assert value(s, "gpuledger_stranded_gpus", hostname="n2", clique=clique) == 4


def test_every_declared_metric_is_exported_and_no_job_id_label(scraped, messages):
    text, s = scraped
    names = {k[0] for k in s}
    for spec in AGGREGATE_METRICS:
        if spec.type in ("counter", "gauge") and spec.name not in (
            "gpuledger_tenant_quota_limit_gpus",
            "gpuledger_tenant_quota_borrowing_limit_gpus",  # test_quota_limits_per_tenant
            "gpuledger_tenant_quota_lending_limit_gpus",
            "gpuledger_tenant_model_quota_borrowing_limit_gpus",  # test_quota_limits_per_model
            "gpuledger_tenant_model_quota_lending_limit_gpus",
            "gpuledger_refused_events_total",
            "gpuledger_timed_out_workloads_total",  # no time limits here: see test_time_limit_*
            "gpuledger_user_model_gpus",  # no per-model user bounds here: test_users_listing
            "gpuledger_user_model_limit",
            "gpuledger_tenant_reserved_gpu_seconds_total",  # no window: test_reserved_projection
        ):
            assert spec.name in names or spec.name + "_total" in names, spec.name
    jobs = {"train-b", "infer-a", "small-a", "mig-a", "big-b", "bad-a"}
    for _, labels in s:
        assert not jobs & {v for _, v in labels}
    assert value(s, "gpuledger_exporter_up") == 1
    assert value(s, "gpuledger_projection_clock_seconds") == 1260


def test_unreadable_projection_serves_up_zero(tmp_path):
    c = ProjectionCollector(tmp_path / "missing.duckdb", wait_s=0.1)
    text = generate_latest(new_registry(c)).decode()
    assert "gpuledger_exporter_up 0.0" in text
    assert "gpuledger_exporter_read_errors_total 1.0" in text


def test_quota_limits_per_tenant(tmp_path):
    # given tenants with a borrowing limit, a lending limit, and neither
    rebuild(config_log(TENANTS_WITH_LIMITS), tmp_path / "p.duckdb")
    _, s = scrape(tmp_path / "p.duckdb")
    # then each limit is a gauge in GPUs, absent where unset
    assert value(s, "gpuledger_tenant_quota_borrowing_limit_gpus", tenant="a") == 2
    assert value(s, "gpuledger_tenant_quota_lending_limit_gpus", tenant="b") == 1.5
    got = {
        (name, dict(labels)["tenant"])
        for name, labels in s
        if name.startswith("gpuledger_tenant_quota_")
        and "_limit_gpus" in name
        and "quota_limit" not in name
    }
    assert got == {
        ("gpuledger_tenant_quota_borrowing_limit_gpus", "a"),
        ("gpuledger_tenant_quota_lending_limit_gpus", "b"),
    }


def test_quota_limits_per_model(tmp_path):
    # given a tenant with a per-model lending limit and one with a per-model borrowing limit
    doc = {
        "tenants": [
            {"name": "p", "guaranteed": 8, "guaranteed_by_model": {"H100-80GB": 8},
             "lending_limit_by_model": {"H100-80GB": 2}},
            {"name": "r", "guaranteed": 2, "guaranteed_by_model": {"H100-80GB": 2},
             "borrowing_limit_by_model": {"H100-80GB": "500m"}},
        ]
    }  # fmt: skip
    rebuild(config_log(doc), tmp_path / "p.duckdb")
    _, s = scrape(tmp_path / "p.duckdb")
    # then each is a gauge per tenant and modelName, in GPUs, absent where unset
    got = {
        (name, dict(labels)["tenant"], dict(labels)["modelName"]): v
        for (name, labels), v in s.items()
        if name.startswith("gpuledger_tenant_model_quota_")
    }
    assert got == {
        ("gpuledger_tenant_model_quota_lending_limit_gpus", "p", "H100-80GB"): 2,
        ("gpuledger_tenant_model_quota_borrowing_limit_gpus", "r", "H100-80GB"): 0.5,
    }
