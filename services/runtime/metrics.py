"""Each service's own Prometheus metrics, read from its host on scrape.

The one generic host loop (services/runtime/host.py) keeps `HostStats` (plain counters and a
`DurationHistogram` of decide calls); `ServiceCollector` turns the stats of every registered
host into metric families when Prometheus scrapes, so nothing in a decider (pure) or in the
hot path of the host knows about Prometheus. The projector reports through its
`ProjectorStatus`. `serve_metrics` exposes a registry over HTTP (`/metrics`).

Every metric is declared once in `SERVICE_METRICS` (name, type, labels, meaning);
docs/metrics.md is generated from these declarations and those of the aggregate exporter
(projections/exporter.py): `gpuledger metrics --docs`.

Labels: `service` (admission, quota, scheduler, preemption, node-agent, projector) and, for
node agents, `node` (the agent's node; `sim` for the simulated fleet of `up`/`demo`), empty
for the others; never a job id.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

DECIDE_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
"""Upper bounds (seconds) of the decide latency histogram."""


@dataclass
class DurationHistogram:
    """A fixed-bucket histogram of durations in seconds (no Prometheus dependency in the
    host's hot path; exported on scrape)."""

    bounds: tuple[float, ...] = DECIDE_BUCKETS
    counts: list[int] = field(default_factory=list)
    """Per bucket (not cumulative); the last one counts values above every bound."""
    total_s: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.total_s += seconds
        self.n += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus buckets: [(le, cumulative count)], ending with `+Inf`."""
        out, running = [], 0
        for bound, count in zip([*map(_le, self.bounds), "+Inf"], list(self.counts), strict=True):
            running += count
            out.append((bound, running))
        return out


def _le(bound: float) -> str:
    return repr(float(bound))


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric: the single declaration the collectors and docs/metrics.md use."""

    name: str
    type: str  # counter | gauge | histogram
    labels: tuple[str, ...]
    help: str
    source: str = ""
    """Where the value comes from (for the docs)."""

    def family(self, value_labels: Iterable[str] | None = None) -> Any:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        labels = list(self.labels if value_labels is None else value_labels)
        name = self.name
        if self.type == "counter":
            return CounterMetricFamily(name.removesuffix("_total"), self.help, labels=labels)
        if self.type == "gauge":
            return GaugeMetricFamily(name, self.help, labels=labels)
        if self.type == "histogram":
            return HistogramMetricFamily(name, self.help, labels=labels)
        raise ValueError(self.type)


def _spec(name: str, type_: str, labels: tuple[str, ...], help_: str, source: str) -> MetricSpec:
    return MetricSpec(name, type_, labels, help_, source)


_SVC = ("service", "node")
SERVICE_METRICS: tuple[MetricSpec, ...] = (
    _spec(
        "gpuledger_service_decide_duration_seconds",
        "histogram",
        _SVC,
        "Wall-clock duration of each decide call of the service's decider.",
        "HostStats.decide_seconds",
    ),
    _spec(
        "gpuledger_service_fold_lag_messages",
        "gauge",
        _SVC,
        "Stream messages the service has not folded yet: the stream's last sequence (as the "
        "host last saw it) minus the last sequence folded; 0 when caught up.",
        "Host.stream_seq - Host.folded_seq",
    ),
    _spec(
        "gpuledger_service_stalled_seconds",
        "gauge",
        _SVC,
        "Seconds since the service last folded a message while the stream held messages it had "
        "not folded: how long it has made no progress (0 when caught up, or when its folded "
        "sequence moved since the previous scrape). A leader stuck at one position shows here, "
        "whatever its lease says.",
        "Host.folded_seq, compared scrape to scrape",
    ),
    _spec(
        "gpuledger_service_folded_seq",
        "gauge",
        _SVC,
        "Last stream sequence the service has folded.",
        "Host.folded_seq",
    ),
    _spec(
        "gpuledger_service_stream_last_seq",
        "gauge",
        _SVC,
        "The stream's last sequence as the service last saw it.",
        "Host.stream_seq",
    ),
    _spec(
        "gpuledger_service_events_folded_total",
        "counter",
        _SVC,
        "Stream messages the service has folded since it started.",
        "HostStats.folded",
    ),
    _spec(
        "gpuledger_service_decisions_total",
        "counter",
        _SVC,
        "Decide calls that returned events (decision batches).",
        "HostStats.decisions",
    ),
    _spec(
        "gpuledger_service_events_published_total",
        "counter",
        _SVC,
        "Decided events the service published that were new to the log.",
        "HostStats.published",
    ),
    _spec(
        "gpuledger_service_duplicate_publishes_total",
        "counter",
        _SVC,
        "Decided events the stream deduplicated (already in the log).",
        "HostStats.duplicates",
    ),
    _spec(
        "gpuledger_service_dead_letters_detected_total",
        "counter",
        _SVC,
        "Messages the service could not fold (undecodable, refused, evolve raised).",
        "HostStats.dead_letters",
    ),
    _spec(
        "gpuledger_service_dead_letters_published_total",
        "counter",
        _SVC,
        "DeadLettered events this service recorded in the log.",
        "HostStats.dead_letters_published",
    ),
    _spec(
        "gpuledger_service_decide_errors_total",
        "counter",
        _SVC,
        "Decide calls that raised (a decider bug; the host keeps folding).",
        "HostStats.decide_errors",
    ),
    _spec(
        "gpuledger_service_publish_errors_total",
        "counter",
        _SVC,
        "Decided events that could not be published.",
        "HostStats.publish_errors",
    ),
    _spec(
        "gpuledger_service_store_write_errors_total",
        "counter",
        _SVC,
        "Decided events the event store refused because it is full (NATS `insufficient "
        "resources`, a store write error) or did not acknowledge while connected.",
        "HostStats.store_write_errors",
    ),
    _spec(
        "gpuledger_service_leader",
        "gauge",
        _SVC,
        "1 while the service may decide (holds its leader lease, or runs without one), "
        "else 0 (a folding standby).",
        "Host.may_decide",
    ),
    _spec(
        "gpuledger_service_refusing",
        "gauge",
        _SVC,
        "1 while the service refuses to decide because the log has a hole, else 0.",
        "Host.gap",
    ),
)

_COUNTERS = {
    "gpuledger_service_events_folded_total": "folded",
    "gpuledger_service_decisions_total": "decisions",
    "gpuledger_service_events_published_total": "published",
    "gpuledger_service_duplicate_publishes_total": "duplicates",
    "gpuledger_service_dead_letters_detected_total": "dead_letters",
    "gpuledger_service_dead_letters_published_total": "dead_letters_published",
    "gpuledger_service_decide_errors_total": "decide_errors",
    "gpuledger_service_publish_errors_total": "publish_errors",
    "gpuledger_service_store_write_errors_total": "store_write_errors",
}


class ServiceCollector:
    """A Prometheus collector over the hosts (and projector statuses) of this process.

    `add_host(host)` registers a running Host; a restarted service registers its new host,
    which replaces the old one under the same labels (counters restart from zero, which
    Prometheus reads as a counter reset). `add_projector(status, stream_seq)` registers the
    projector: its committed sequence, and a callable giving the stream's last sequence."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hosts: dict[tuple[str, str], Any] = {}
        self._projectors: dict[str, tuple[Any, Callable[[], int | None]]] = {}
        self._progress: dict[tuple[str, str], tuple[int, float]] = {}
        """(folded seq, monotonic time it was first seen) per service, for the stall gauge."""

    def _stalled_s(self, labels: tuple[str, str], folded: int, lag: int) -> float:
        """Seconds `labels`' service has stood at `folded` with `lag` messages to fold."""
        now = time.monotonic()
        seen = self._progress.get(labels)
        if seen is None or seen[0] != folded or lag <= 0:
            self._progress[labels] = (folded, now)
            return 0.0
        return round(now - seen[1], 3)

    @staticmethod
    def labels_of(host: Any) -> tuple[str, str]:
        svc = host.service
        node = str(getattr(svc, "instance", "") or "") if svc.name == "node-agent" else ""
        return (svc.name, node)

    def add_host(self, host: Any) -> None:
        with self._lock:
            self._hosts[self.labels_of(host)] = host

    def add_projector(
        self,
        status: Any,
        stream_seq: Callable[[], int | None] | None = None,
        name: str = "projector",
    ) -> None:
        """`stream_seq` defaults to what the projector itself last saw (`status.stream_seq`)."""
        if stream_seq is None:

            def stream_seq() -> int | None:
                return getattr(status, "stream_seq", 0) or None

        with self._lock:
            self._projectors[name] = (status, stream_seq)

    def describe(self) -> list:
        return []  # collected on demand only

    def collect(self) -> Iterator[Any]:
        with self._lock:
            hosts = sorted(self._hosts.items())
            projectors = sorted(self._projectors.items())
        fams = {s.name: s.family() for s in SERVICE_METRICS}
        for labels, host in hosts:
            lv = list(labels)
            st = host.stats
            h = st.decide_seconds
            fams["gpuledger_service_decide_duration_seconds"].add_metric(
                lv, buckets=h.cumulative(), sum_value=h.total_s
            )
            folded, stream = host.folded_seq, max(host.stream_seq, host.folded_seq)
            fams["gpuledger_service_fold_lag_messages"].add_metric(lv, stream - folded)
            fams["gpuledger_service_stalled_seconds"].add_metric(
                lv, self._stalled_s(labels, folded, stream - folded)
            )
            fams["gpuledger_service_folded_seq"].add_metric(lv, folded)
            fams["gpuledger_service_stream_last_seq"].add_metric(lv, stream)
            for name, attr in _COUNTERS.items():
                fams[name].add_metric(lv, getattr(st, attr))
            fams["gpuledger_service_leader"].add_metric(lv, 1 if host.may_decide else 0)
            fams["gpuledger_service_refusing"].add_metric(lv, 1 if host.gap else 0)
        for name, (status, stream_seq) in projectors:
            lv = [name, ""]
            folded = status.committed_seq
            fams["gpuledger_service_folded_seq"].add_metric(lv, folded)
            try:
                stream = stream_seq()
            except Exception:  # noqa: BLE001 - a scrape never fails for it
                stream = None
            own = getattr(status, "stream_seq", 0) or 0
            if stream is not None or own:
                stream = max(stream or 0, own, folded)
                fams["gpuledger_service_stream_last_seq"].add_metric(lv, stream)
                fams["gpuledger_service_fold_lag_messages"].add_metric(lv, stream - folded)
                fams["gpuledger_service_stalled_seconds"].add_metric(
                    lv, self._stalled_s((name, ""), folded, stream - folded)
                )
            fams["gpuledger_service_refusing"].add_metric(
                lv, 1 if status.state == "refusing" else 0
            )
        yield from fams.values()


def serve_metrics(port: int, registry: Any, addr: str = "0.0.0.0") -> Any:
    """Serve `registry` on http://ADDR:PORT/metrics in a daemon thread; returns the server
    (call `.shutdown()` to stop it)."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server


def new_registry(*collectors: Any) -> Any:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    for c in collectors:
        registry.register(c)
    return registry


def docs_table(specs: Iterable[MetricSpec]) -> str:
    """A Markdown table of metric declarations."""
    rows = ["| name | type | labels | meaning |", "|---|---|---|---|"]
    for s in specs:
        labels = ", ".join(f"`{x}`" for x in s.labels) or "-"
        meaning = s.help + (f" (from {s.source})" if s.source else "")
        rows.append(f"| `{s.name}` | {s.type} | {labels} | {meaning.replace('|', '/')} |")
    return "\n".join(rows) + "\n"
