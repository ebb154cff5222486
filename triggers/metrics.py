"""Prometheus metrics of the daemon: fires by outcome, tick and launch durations,
fire latency, active runs. One registry per daemon (tests build many)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60)


class Metrics:
    """The daemon's instruments, registered on their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.fires = Counter(
            "triggers_fires", "Fire ledger outcomes recorded", ["outcome"], registry=self.registry
        )
        self.tick_duration = Histogram(
            "triggers_tick_duration_seconds",
            "Duration of one scheduler tick",
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.launch_duration = Histogram(
            "triggers_launch_duration_seconds",
            "Duration of a runner start call (a batch)",
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.fire_latency = Histogram(
            "triggers_fire_latency_seconds",
            "Run launched minus its occurrence (plus jitter)",
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.active_runs = Gauge(
            "triggers_active_runs", "Runs the monitor is watching", registry=self.registry
        )
        self.ticks_failed = Counter(
            "triggers_ticks_failed", "Ticks that failed and were retried", registry=self.registry
        )

    def fired(self, outcome: str, count: int = 1) -> None:
        self.fires.labels(outcome=outcome).inc(count)
