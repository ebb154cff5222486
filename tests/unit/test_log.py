"""Log lines for journald: the `<priority>` prefix systemd's stream parser reads."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from triggers.log import configure_logging, journal_stream_attached, syslog_priority


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


def _identity(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_dev}:{stat.st_ino}"


def _log_everything(path: Path, *, json_lines: bool) -> list[str]:
    with path.open("w") as stream:
        configure_logging(json=json_lines, level="debug", stream=stream)
        log = structlog.get_logger("test")
        log.debug("detail_noted")
        log.info("run_launched", trigger_id="t")
        log.warning("occurrence_missed", trigger_id="t")
        log.error("run_finished", outcome="failed")
        try:
            int("boom")
        except ValueError:
            log.exception("tick_failed")
        logging.getLogger("sqlalchemy.pool").error("connection lost")
    return path.read_text().splitlines()


@pytest.mark.usefixtures("restore_logging")
def test_lines_carry_syslog_priorities_when_stderr_is_the_journal_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "journal"
    out.touch()
    monkeypatch.setenv("JOURNAL_STREAM", _identity(out))

    lines = _log_everything(out, json_lines=True)

    prefixes = [line[:3] for line in lines]
    assert prefixes == ["<7>", "<6>", "<4>", "<3>", "<3>", "<3>"]
    events = [json.loads(line[3:]) for line in lines]
    assert [e["event"] for e in events][:5] == [
        "detail_noted",
        "run_launched",
        "occurrence_missed",
        "run_finished",
        "tick_failed",
    ]
    assert events[4]["exception"][0]["exc_type"] == "ValueError"


@pytest.mark.usefixtures("restore_logging")
def test_every_line_of_a_console_traceback_keeps_the_priority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "journal"
    out.touch()
    monkeypatch.setenv("JOURNAL_STREAM", _identity(out))

    lines = _log_everything(out, json_lines=False)

    traceback_lines = [line for line in lines if "ValueError" in line]
    assert traceback_lines
    assert all(line.startswith("<3>") for line in traceback_lines)
    assert all(line[:1] == "<" and line[2:3] == ">" for line in lines)


@pytest.mark.usefixtures("restore_logging")
def test_no_prefix_when_the_stream_is_not_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal, elsewhere = tmp_path / "journal", tmp_path / "redirected"
    journal.touch()
    monkeypatch.setenv("JOURNAL_STREAM", _identity(journal))

    lines = _log_everything(elsewhere, json_lines=True)

    assert all(line.startswith("{") for line in lines)


def test_journal_stream_needs_the_device_and_inode_of_the_stream(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with path.open("w") as stream:
        stat = os.fstat(stream.fileno())
        assert journal_stream_attached(stream, {"JOURNAL_STREAM": f"{stat.st_dev}:{stat.st_ino}"})
        assert not journal_stream_attached(stream, {"JOURNAL_STREAM": f"{stat.st_dev}:1"})
        assert not journal_stream_attached(stream, {"JOURNAL_STREAM": "garbage"})
        assert not journal_stream_attached(stream, {})


@pytest.mark.parametrize(
    ("level", "priority"),
    [
        (logging.DEBUG, 7),
        (logging.INFO, 6),
        (logging.WARNING, 4),
        (logging.ERROR, 3),
        (logging.CRITICAL, 2),
    ],
    ids=["debug", "info", "warning", "error", "critical"],
)
def test_syslog_priority_of_each_level(level: int, priority: int) -> None:
    assert syslog_priority(level) == priority
