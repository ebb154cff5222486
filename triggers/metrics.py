"""Prometheus metrics of the daemon: what an operator alerts on.

Fires by outcome and reason, per-trigger last success and next fire, triggers by
state (paused, blocked, ...), parked runs, store errors, reload results, build
info, process metrics, tick and launch durations, fire latency. One registry per
daemon (tests build many). Every name is listed in `docs/catalogue.md`.

Per-trigger and state gauges are read at scrape time from what the daemon already
holds in memory (the scheduler's view of its triggers), so an idle daemon pays
nothing for them between scrapes.
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from triggers.errors import StoreError

_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60)
_STATES = ("enabled", "paused", "disabled", "retired")


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerGauge:
    """One trigger as the metrics see it (what the scheduler knows of it now)."""

    trigger_id: str
    state: str
    """`enabled`, `paused`, `disabled` or `retired`."""
    blocked: bool = False
    """A run of the trigger waits for an operator and keeps new ones from launching."""
    next_fire_at: datetime | None = None


TriggerSource = Callable[[], Iterable[TriggerGauge]]
LastSettled = Callable[[], dict[str, dict[str, datetime]]]


class Metrics:
    """The daemon's instruments, registered on their own registry."""

    def __init__(self, *, version: str = "0") -> None:
        # No `*_created` series: nothing alerts on them, and they double the output.
        disable_created_metrics()  # type: ignore[no-untyped-call] # prometheus_client leaves it unannotated
        self.registry = CollectorRegistry()
        registry = self.registry
        self.fires = Counter(
            "triggers_fires",
            "Fire ledger outcomes recorded, by outcome and reason",
            ["outcome", "reason"],
            registry=registry,
        )
        self.tick_duration = Histogram(
            "triggers_tick_duration_seconds",
            "Duration of one scheduler tick",
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.launch_duration = Histogram(
            "triggers_launch_duration_seconds",
            "Duration of a runner start call (a batch)",
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.fire_latency = Histogram(
            "triggers_fire_latency_seconds",
            "Run launched minus its occurrence (plus jitter)",
            buckets=_DURATION_BUCKETS,
            registry=registry,
        )
        self.active_runs = Gauge(
            "triggers_active_runs", "Runs the monitor is watching", registry=registry
        )
        self.ticks_failed = Counter(
            "triggers_ticks_failed", "Ticks that failed and were retried", registry=registry
        )
        self.last_tick = Gauge(
            "triggers_last_tick_timestamp_seconds",
            "When the scheduler last finished a tick (Unix time)",
            registry=registry,
        )
        self.store_errors = Counter(
            "triggers_store_errors",
            "Store operations that failed, by operation",
            ["operation"],
            registry=registry,
        )
        self.reloads = Counter(
            "triggers_reloads",
            "Declarations applied at start or on SIGHUP, by result",
            ["result"],
            registry=registry,
        )
        self.reload_successful = Gauge(
            "triggers_last_reload_successful",
            "1 when the last apply of the declarations file succeeded, else 0",
            registry=registry,
        )
        self.reload_at = Gauge(
            "triggers_last_reload_timestamp_seconds",
            "When the declarations file was last applied or refused (Unix time)",
            registry=registry,
        )
        self.alerts_sent = Counter(
            "triggers_alerts_delivered",
            "Alerts delivered, by channel and event",
            ["channel", "event"],
            registry=registry,
        )
        self.alerts_failed = Counter(
            "triggers_alerts_failed",
            "Alerts that could not be delivered after their attempts, by channel and event",
            ["channel", "event"],
            registry=registry,
        )
        Info("triggers_build", "Version of the running daemon", registry=registry).info(
            {"version": version, "python": platform.python_version()}
        )
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        self._settled = _SettledTimes()
        self._triggers = _TriggerCollector(self._settled)
        registry.register(self._triggers)
        self.last_tick_at: datetime | None = None
        """What `triggers_last_tick_timestamp_seconds` shows (None: no tick yet)."""
        self.last_reload: str | None = None
        """The result of the last apply (see `reloaded`); None: none yet."""

    def fired(self, outcome: str, count: int = 1, *, reason: str | None = None) -> None:
        """Count `count` ledger outcomes (a range counts each occurrence)."""
        self.fires.labels(outcome=outcome, reason=reason or "").inc(count)

    def store_error(self, operation: str) -> None:
        self.store_errors.labels(operation=operation).inc()

    def tick_failed(self, error: BaseException) -> None:
        """A tick raised `error`; a store error counts as one of the store's too."""
        self.ticks_failed.inc()
        if isinstance(error, StoreError):
            self.store_error("tick")

    def reloaded(self, result: str, *, at: datetime) -> None:
        """Record an apply: `applied`, `unchanged`, `refused` or `failed`."""
        self.reloads.labels(result=result).inc()
        self.reload_successful.set(1 if result in ("applied", "unchanged") else 0)
        self.reload_at.set(at.timestamp())
        self.last_reload = result

    def ticked(self, at: datetime) -> None:
        self.last_tick.set(at.timestamp())
        self.last_tick_at = at

    def run_settled(self, trigger_id: str, outcome: str, at: datetime) -> None:
        """A run of the trigger stopped: the last success or failure moves to `at`."""
        self._settled.record(trigger_id, outcome, at)

    def watch_triggers(self, source: TriggerSource, *, last_settled: LastSettled) -> None:
        """Read per-trigger gauges from `source` at each scrape.

        `last_settled` answers the ledger's last `completed` and `failed` settlement
        per trigger; it is asked once, at the first scrape, and the runs seen settling
        afterwards keep the times current.
        """
        self._settled.seed_with(last_settled)
        self._triggers.source = source

    def alert_delivered(self, *, channel: str, event: str) -> None:
        self.alerts_sent.labels(channel=channel, event=event).inc()

    def alert_failed(self, *, channel: str, event: str) -> None:
        self.alerts_failed.labels(channel=channel, event=event).inc()

    def watch_alerts(self, counts: Callable[[], dict[str, int]]) -> None:
        """Report the outbox's alerts by status (`counts()`) at each scrape."""
        self.registry.register(_AlertCollector(counts))

    def watch_pools(self, source: PoolSource) -> None:
        """Report each pool's slots and active runs (`source()`) at each scrape."""
        self.registry.register(_PoolCollector(source))

    def watch_parked(self, count: Callable[[], float]) -> None:
        """Report `count()` (runs waiting for an operator; NaN: unknown) at each scrape."""
        gauge = Gauge(
            "triggers_runs_parked",
            "Runs waiting for an operator (runs retry / runs cancel)",
            registry=self.registry,
        )
        gauge.set_function(count)


PoolSource = Callable[[], Iterable[tuple[str, int, int]]]
"""Each pool's name, slots and active runs, read at each scrape."""


class _PoolCollector(Collector):
    """`triggers_pool_slots{pool}` and `triggers_pool_active_runs{pool}`, read at each
    scrape from the store (the ledger's active rows of the pool's members)."""

    def __init__(self, source: PoolSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        slots = GaugeMetricFamily(
            "triggers_pool_slots", "Runs a pool's members may have active at once", labels=["pool"]
        )
        active = GaugeMetricFamily(
            "triggers_pool_active_runs",
            "Runs of a pool's members active now (launching or launched)",
            labels=["pool"],
        )
        try:
            pools = sorted(self._source())
        except StoreError:
            pools = []
        for name, size, running in pools:
            slots.add_metric([name], size)
            active.add_metric([name], running)
        yield slots
        yield active


class _AlertCollector(Collector):
    """`triggers_alerts{status}`: the outbox's alerts, read at each scrape."""

    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "triggers_alerts", "Alerts in the outbox, by status", labels=["status"]
        )
        try:
            counts = self._counts()
        except StoreError:
            counts = {}
        for status, count in sorted(counts.items()):
            family.add_metric([status], count)
        yield family


class _Unrecorded:
    """An instrument that records nothing (see `UnrecordedMetrics`)."""

    def labels(self, **_labels: str) -> _Unrecorded:
        return self

    def inc(self, amount: float = 1) -> None:
        return None

    def observe(self, amount: float) -> None:
        return None

    def set(self, value: float) -> None:
        return None


class UnrecordedMetrics(Metrics):
    """Metrics nobody scrapes, so none are kept: the instruments of a scheduler that
    runs a simulation, where they would cost a part of every simulated tick."""

    def __init__(self) -> None:  # Metrics.__init__ is not called: none of its registry is wanted
        self.registry = CollectorRegistry()
        nothing: Any = _Unrecorded()
        self.fires = self.tick_duration = self.launch_duration = self.fire_latency = nothing
        self.active_runs = self.ticks_failed = self.last_tick = self.store_errors = nothing
        self.reloads = self.reload_successful = self.reload_at = nothing
        self.last_tick_at = None
        self.last_reload = None
        self._settled = _SettledTimes()
        self._triggers = _TriggerCollector(self._settled)

    def fired(self, outcome: str, count: int = 1, *, reason: str | None = None) -> None:
        return None

    def store_error(self, operation: str) -> None:
        return None

    def ticked(self, at: datetime) -> None:
        return None

    def run_settled(self, trigger_id: str, outcome: str, at: datetime) -> None:
        return None


class _SettledTimes:
    """Last success and failure per trigger: seeded from the ledger once, then kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._times: dict[str, dict[str, datetime]] = {"completed": {}, "failed": {}}
        self._seed: LastSettled | None = None

    def seed_with(self, seed: LastSettled) -> None:
        with self._lock:
            self._seed = seed

    def record(self, trigger_id: str, outcome: str, at: datetime) -> None:
        with self._lock:
            times = self._times.get(outcome)
            if times is not None and (trigger_id not in times or times[trigger_id] < at):
                times[trigger_id] = at

    def snapshot(self) -> dict[str, dict[str, datetime]]:
        with self._lock:
            seed, self._seed = self._seed, None
        if seed is not None:
            # Outside the lock: the ledger query may take a while on a big ledger.
            try:
                found = seed()
            except StoreError:
                self.seed_with(seed)  # the next scrape asks again
                found = {}
            for outcome, times in found.items():
                for trigger_id, at in times.items():
                    self.record(trigger_id, outcome, at)
        with self._lock:
            return {outcome: dict(times) for outcome, times in self._times.items()}


class _TriggerCollector(Collector):
    """The per-trigger and per-state gauges, computed at scrape time."""

    def __init__(self, settled: _SettledTimes) -> None:
        self.source: TriggerSource | None = None
        self._settled = settled

    def describe(self) -> Iterator[Metric]:
        return iter(())  # computed at scrape time; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        if self.source is None:
            return
        gauges = list(self.source())
        states = GaugeMetricFamily("triggers_triggers", "Triggers by state", labels=["state"])
        counts = dict.fromkeys(_STATES, 0)
        for gauge in gauges:
            counts[gauge.state] = counts.get(gauge.state, 0) + 1
        for state, count in counts.items():
            states.add_metric([state], count)
        yield states
        blocked = [g.trigger_id for g in gauges if g.blocked]
        yield GaugeMetricFamily(
            "triggers_triggers_blocked",
            "Triggers whose new runs wait behind a run that needs an operator",
            value=len(blocked),
        )
        yield _per_trigger(
            "triggers_trigger_blocked",
            "1 for each trigger blocked behind a run that needs an operator",
            ((trigger_id, 1.0) for trigger_id in blocked),
        )
        yield _per_trigger(
            "triggers_trigger_paused",
            "1 for each paused trigger",
            ((g.trigger_id, 1.0) for g in gauges if g.state == "paused"),
        )
        yield _per_trigger(
            "triggers_trigger_next_fire_timestamp_seconds",
            "When the trigger next fires (Unix time), for enabled triggers",
            (
                (g.trigger_id, g.next_fire_at.timestamp())
                for g in gauges
                if g.state == "enabled" and g.next_fire_at is not None
            ),
        )
        known = {g.trigger_id for g in gauges if g.state != "retired"}
        settled = self._settled.snapshot()
        for outcome, name, help_text in (
            ("completed", "success", "When a run of the trigger last completed (Unix time)"),
            ("failed", "failure", "When a run of the trigger last failed (Unix time)"),
        ):
            yield _per_trigger(
                f"triggers_trigger_last_{name}_timestamp_seconds",
                help_text,
                (
                    (trigger_id, at.timestamp())
                    for trigger_id, at in settled[outcome].items()
                    if trigger_id in known
                ),
            )


def _per_trigger(name: str, help_text: str, values: Iterable[tuple[str, float]]) -> Metric:
    family = GaugeMetricFamily(name, help_text, labels=["trigger_id"])
    for trigger_id, value in values:
        family.add_metric([trigger_id], value)
    return family
