"""The dashboard's words (schedules, relative times, outcomes), sessions and safe paths."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from triggers.api.dashboard._render import local_path
from triggers.api.dashboard._sessions import IDLE, LIFETIME, Sessions
from triggers.api.dashboard._words import LOOKS, look, relative, schedule_words

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("schedule", "zone", "said"),
    [
        ("cron 30 2 * * *", "Europe/Berlin", "At 02:30, every day, Berlin time"),
        ("cron */5 * * * *", "UTC", "Every 5 minutes, UTC"),
        ("cron 0 6 * * 1-5", "America/New_York", "At 06:00, Monday through Friday, New York time"),
        ("cron @daily", "UTC", "At 00:00, every day, UTC"),
        ("cron H 3 * * *", "UTC", "cron H 3 * * *, UTC"),
        ("every 90s", "UTC", "Every 90s"),
        ("at 2027-01-01T00:00:00Z", "UTC", "Once, at 2027-01-01 00:00:00 UTC"),
    ],
    ids=["daily-berlin", "step", "weekdays", "macro", "hashed", "every", "at"],
)
def test_a_schedule_reads_in_words_with_its_zone(schedule: str, zone: str, said: str) -> None:
    assert schedule_words(schedule, zone) == said


def test_relative_times_round_to_their_largest_unit() -> None:
    assert relative(NOW - timedelta(minutes=3, seconds=20), now=NOW) == "3 min ago"
    assert relative(NOW + timedelta(hours=2, minutes=59), now=NOW) == "in 2 h"
    assert relative("2026-03-01T11:59:15.000Z", now=NOW) == "45 s ago"
    assert relative(NOW, now=NOW) == "just now"
    assert relative(None, now=NOW) == "-"


def test_every_outcome_has_an_icon_and_a_word_not_only_a_colour() -> None:
    for name, found in LOOKS.items():
        assert found.icon.strip() and found.word.strip(), name
    assert look("failed").word == "failed" and look("something-new").word == "something-new"


def test_a_session_gets_new_ids_at_sign_in_and_expires_when_idle() -> None:
    sessions = Sessions(limit=3)
    anonymous = sessions.start(now=NOW)
    signed = sessions.sign_in(anonymous, token="t" * 32, name="ci", now=NOW)
    assert signed.id != anonymous.id and signed.csrf != anonymous.csrf
    assert sessions.find(anonymous.id, now=NOW) is None
    assert "t" * 32 not in repr(signed)
    assert sessions.find(signed.id, now=NOW + IDLE - timedelta(seconds=1)) is not None
    assert sessions.find(signed.id, now=NOW + 2 * IDLE) is None
    kept = sessions.sign_in(None, token="u" * 32, name=None, now=NOW)
    for hour in range(1, 24 * 8, 6):  # used every 6 h: never idle, yet not for ever
        alive = sessions.find(kept.id, now=NOW + timedelta(hours=hour))
        if NOW + timedelta(hours=hour) - NOW > LIFETIME:
            assert alive is None
            break
    else:
        pytest.fail("a session outlived its lifetime")


def test_sessions_are_bounded_least_recently_used_first() -> None:
    sessions = Sessions(limit=2)
    first, second = sessions.start(now=NOW), sessions.start(now=NOW)
    assert sessions.find(first.id, now=NOW) is not None  # first is now the newest used
    sessions.start(now=NOW)
    assert len(sessions) == 2
    assert sessions.find(second.id, now=NOW) is None
    assert sessions.find(first.id, now=NOW) is not None


def test_a_csrf_token_is_compared_whole() -> None:
    session = Sessions().start(now=NOW)
    assert session.csrf_matches(session.csrf)
    assert not session.csrf_matches(session.csrf[:-1])
    assert not session.csrf_matches(None) and not session.csrf_matches("")


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("/triggers/nightly", "/triggers/nightly"),
        ("//evil.example/", "/"),
        ("https://evil.example/", "/"),
        ("/\\evil.example", "/"),
        (None, "/"),
    ],
)
def test_sign_in_returns_only_to_a_path_of_this_dashboard(given: str | None, kept: str) -> None:
    assert local_path(given) == kept
