"""Bounded capture of effect output."""

from __future__ import annotations

from pathlib import Path

from looms_runtime._effects.output import HeadBuffer, StreamFile, TailBuffer, read_stream


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


def test_a_stream_file_keeps_the_tail_on_disk_within_twice_its_limit(tmp_path: Path) -> None:
    stream = StreamFile(tmp_path, "stdout", 10)
    for index in range(25):
        stream.feed(f"{index:03d}\n".encode())  # 4 bytes a line, 100 in all
    stream.close()

    found = read_stream(tmp_path, "stdout", 10)

    assert found.text == "2\n023\n024\n"
    assert found.dropped == 90
    assert sum(path.stat().st_size for path in tmp_path.iterdir()) <= 2 * 10 + 4


def test_a_stream_never_written_reads_empty(tmp_path: Path) -> None:
    found = read_stream(tmp_path, "stderr", 10)

    assert (found.text, found.dropped, found.modified_ns) == ("", 0, None)


def test_a_stream_file_reached_through_a_link_is_not_read(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("not the step's\n")
    (tmp_path / "stdout.0").symlink_to(elsewhere)

    assert read_stream(tmp_path, "stdout", 100).text == ""
