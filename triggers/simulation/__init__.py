"""`triggers simulate`: the ledger the real scheduler would write, on a simulated clock.

A scenario (declarations, a range, how long runs last, downtimes, pauses, clock
jumps, edits, failed runs) runs through the daemon's own loop (`triggers.scheduler`) against
the memory store and a runner whose runs only take time. Nothing is executed and
no real store is opened.
"""

from triggers.simulation._alerts import ForecastAlert, forecast_alerts
from triggers.simulation._driver import simulate
from triggers.simulation._scenario import (
    DEFAULT_DURATION,
    FAILED_ERROR,
    ClockJump,
    Downtime,
    Edit,
    Failure,
    Interval,
    Pause,
    Scenario,
    SimulationResult,
)

__all__ = [
    "DEFAULT_DURATION",
    "FAILED_ERROR",
    "ClockJump",
    "Downtime",
    "Edit",
    "Failure",
    "ForecastAlert",
    "Interval",
    "Pause",
    "Scenario",
    "SimulationResult",
    "forecast_alerts",
    "simulate",
]
