"""Bounded capture of effect output."""

from __future__ import annotations

from looms_runtime._effects.output import HeadBuffer, TailBuffer


def test_tail_keeps_the_last_bytes_and_counts_the_dropped_ones() -> None:
    tail = TailBuffer(10)
    for chunk in (b"0123456789", b"abcdef", b"XYZ"):
        tail.feed(chunk)

    assert tail.text() == "9abcdefXYZ"
    assert tail.dropped == 9


def test_tail_under_its_limit_keeps_everything() -> None:
    tail = TailBuffer(100)
    tail.feed(b"hello\n")

    assert (tail.text(), tail.dropped) == ("hello\n", 0)


def test_tail_never_starts_inside_a_multibyte_character() -> None:
    tail = TailBuffer(4)
    tail.feed("aé€".encode())

    assert tail.text() == "€"


def test_head_keeps_the_first_bytes() -> None:
    head = HeadBuffer(5)
    head.feed(b"abc")
    head.feed(b"defgh")

    assert (head.text(), head.full, head.dropped) == ("abcde", True, 3)
