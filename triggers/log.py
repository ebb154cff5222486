"""structlog setup: JSON lines for journald, readable console output on a terminal.

Logs go to stderr; stdout carries command results only. SQLAlchemy's and
Alembic's stdlib loggers are rendered by the same processors.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def wants_json(log_format: str | None) -> bool:
    """JSON unless told otherwise or stderr is a terminal."""
    if log_format is not None:
        return log_format == "json"
    return not sys.stderr.isatty()


def configure_logging(*, json: bool, level: str = "info") -> None:
    """Configure structlog and the stdlib root logger once, for the whole process."""
    numeric = _LEVELS.get(level, logging.INFO)
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any
    if json:
        renderer = structlog.processors.JSONRenderer()
        shared.append(structlog.processors.dict_tracebacks)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        )
    )
    root = logging.getLogger()  # noqa: TID251 (the stdlib root is where foreign logs arrive)
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for noisy in ("sqlalchemy", "alembic", "httpx"):
        logging.getLogger(noisy).setLevel(max(numeric, logging.WARNING))  # noqa: TID251
