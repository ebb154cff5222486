"""The service manager protocol, sd_notify(3), without libsystemd.

systemd hands a `Type=notify` service a datagram socket in `NOTIFY_SOCKET`, and a
watchdog interval in `WATCHDOG_USEC` when the unit sets `WatchdogSec=`. The daemon
says `READY=1` once it schedules, `RELOADING=1` (with `MONOTONIC_USEC=`) and then
`READY=1` around a reload, `STATUS=` with live facts, `WATCHDOG=1` only while the
scheduler keeps its schedule, and `STOPPING=1`. The variables are read once and
removed from the environment, as `sd_notify(unset_environment=1)` does, so the
steps the daemon runs never speak for it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping
from datetime import timedelta

import structlog

from triggers.clock import iso, monotonic_usec
from triggers.scheduler.health import LoopSummary

log = structlog.get_logger()

_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    """Sends sd_notify messages; does nothing when no service manager listens."""

    def __init__(self, *, socket_path: str | None, watchdog: timedelta | None) -> None:
        self._path = socket_path
        self.watchdog = watchdog
        """The interval systemd expects pings within (None: no watchdog)."""
        self._status: str | None = None
        self._sock: socket.socket | None = None

    @classmethod
    def from_environment(cls, environ: MutableMapping[str, str] | None = None) -> Notifier:
        """Take (and remove) the service manager's variables from the environment."""
        env = os.environ if environ is None else environ
        path, usec, pid = (env.pop(name, None) for name in _VARIABLES)
        watchdog = None
        # WATCHDOG_PID names the process the watchdog is for; another one's is not ours.
        if usec and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            watchdog = timedelta(microseconds=int(usec))
        return cls(socket_path=path or None, watchdog=watchdog)

    @property
    def enabled(self) -> bool:
        return self._path is not None

    def ready(self, status: str) -> None:
        self._status = status
        self.send(f"READY=1\nSTATUS={status}")

    def reloading(self) -> None:
        """Tell systemd a reload began; `ready` ends it."""
        self.send(f"RELOADING=1\nMONOTONIC_USEC={monotonic_usec()}")

    def stopping(self) -> None:
        self.send("STOPPING=1\nSTATUS=stopping")

    def status(self, status: str) -> None:
        """Send `STATUS=` when it differs from the last one sent."""
        if status != self._status:
            self._status = status
            self.send(f"STATUS={status}")

    def ping(self) -> None:
        self.send("WATCHDOG=1")

    def send(self, message: str) -> None:
        if self._path is None:
            return
        try:
            if self._sock is None:
                address = "\0" + self._path[1:] if self._path.startswith("@") else self._path
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                sock.connect(address)
                self._sock = sock
            self._sock.sendall(message.encode())
        except OSError as exc:
            self.close()  # reconnect next time (systemd may have been re-executed)
            log.warning("notify_failed", error=str(exc))

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def status_line(
    summary: LoopSummary | None, *, error: str | None = None, stalled_s: float | None = None
) -> str:
    """The `STATUS=` text: what is scheduled, what fires next, what went wrong."""
    if summary is None:
        parts = ["starting"]
    else:
        counts = f"{summary.triggers} trigger{'' if summary.triggers == 1 else 's'}"
        pairs = ((summary.paused, "paused"), (summary.blocked, "blocked"))
        extra = [f"{n} {what}" for n, what in pairs if n]
        if extra:
            counts += f" ({', '.join(extra)})"
        parts = [counts]
        if summary.next_fire_at is not None:
            parts.append(f"next {summary.next_trigger_id} at {iso(summary.next_fire_at)}")
        else:
            parts.append("nothing due")
    if stalled_s is not None:
        parts.append(f"scheduler stalled for {stalled_s:.0f}s")
    if error:
        parts.append(f"last error: {error}")
    return "; ".join(parts)
