"""structlog setup: JSON lines for journald, readable console output on a terminal.

Logs go to stderr; stdout carries command results only. SQLAlchemy's and
Alembic's stdlib loggers are rendered by the same processors.

Under systemd, when stderr is the journal stream systemd named in `JOURNAL_STREAM`,
every line starts with its syslog priority (`<3>` for an error, `<4>` a warning,
`<6>` info, `<7>` debug), which journald's stream parser takes off the line and
records as the entry's `PRIORITY`, so `journalctl -p warning` shows what failed.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import IO, Any

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

# syslog(3) priorities, as sd-daemon(3) lists them for the `<N>` line prefix.
_PRIORITIES = (
    (logging.CRITICAL, 2),
    (logging.ERROR, 3),
    (logging.WARNING, 4),
    (logging.INFO, 6),
)
_DEBUG_PRIORITY = 7


def wants_json(log_format: str | None) -> bool:
    """JSON unless told otherwise or stderr is a terminal."""
    if log_format is not None:
        return log_format == "json"
    return not sys.stderr.isatty()


def journal_stream_attached(stream: IO[str], environ: Mapping[str, str] | None = None) -> bool:
    """Whether `stream` is the journal stream systemd connected us to.

    systemd sets `JOURNAL_STREAM=<device>:<inode>` of the stream it gave the service;
    a stream redirected elsewhere (a file, a pipe to another program) has another
    device and inode, and gets no priority prefixes.
    """
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    device, _, inode = value.partition(":")
    if not (device.isdigit() and inode.isdigit()):
        return False
    try:
        stat = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (stat.st_dev, stat.st_ino) == (int(device), int(inode))


def syslog_priority(levelno: int) -> int:
    """The syslog priority of a stdlib level number."""
    for threshold, priority in _PRIORITIES:
        if levelno >= threshold:
            return priority
    return _DEBUG_PRIORITY


class JournalPrefixFormatter(logging.Formatter):
    """Puts `<priority>` in front of every line another formatter renders.

    Every line, not only the first: journald makes each line an entry of its own,
    and a console traceback's lines must keep the priority of the error they belong to.
    """

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self._inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        text = self._inner.format(record)
        return "\n".join(prefix + line for line in text.split("\n"))


def configure_logging(*, json: bool, level: str = "info", stream: IO[str] | None = None) -> None:
    """Configure structlog and the stdlib root logger once, for the whole process.

    `stream` defaults to stderr; when it is systemd's journal stream, lines carry
    their priority (see the module doc).
    """
    out = stream if stream is not None else sys.stderr
    numeric = _LEVELS.get(level, logging.INFO)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any
    # Tracebacks never show local variables: they hold triggers' inputs and secrets.
    if json:
        renderer = structlog.processors.JSONRenderer()
        shared.append(
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        )
    else:
        renderer = structlog.dev.ConsoleRenderer(
            colors=out.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        cache_logger_on_first_use=True,
    )
    formatter: logging.Formatter = structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
    )
    if journal_stream_attached(out):
        formatter = JournalPrefixFormatter(formatter)
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    root = logging.getLogger()  # noqa: TID251 (the stdlib root is where foreign logs arrive)
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for noisy in ("sqlalchemy", "alembic", "httpx"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))  # noqa: TID251
