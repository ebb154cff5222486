"""Bounded capture of an effect's output: the tail of a stream, or the head of a body.

Loaded by the host's supervisor by path: the standard library only.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path

_CONTINUATION = 0b1000_0000


def _decode(data: bytes, *, cut_front: bool) -> str:
    if cut_front:
        # A tail may start inside a multi-byte character; drop its continuation bytes.
        start = 0
        while start < min(len(data), 3) and data[start] & 0xC0 == _CONTINUATION:
            start += 1
        data = data[start:]
    return data.decode("utf-8", errors="replace")


class TailBuffer:
    """Keeps the last `limit` bytes of a stream and counts the bytes dropped before them."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.total = 0
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self.broken = False

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        if not data or self.limit == 0:
            return
        self._chunks.append(data)
        self._size += len(data)
        while self._chunks and self._size - len(self._chunks[0]) >= self.limit:
            self._size -= len(self._chunks.popleft())

    @property
    def dropped(self) -> int:
        """Bytes received but not kept (the truncation mark)."""
        return self.total - min(self._size, self.limit)

    def text(self) -> str:
        data = b"".join(self._chunks)[-self.limit :] if self.limit else b""
        return _decode(data, cut_front=self.dropped > 0)


class HeadBuffer:
    """Keeps the first `limit` bytes of a body and counts the bytes after them."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.total = 0
        self._data = bytearray()

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.limit - len(self._data)
        if room > 0:
            self._data += data[:room]

    @property
    def full(self) -> bool:
        return len(self._data) >= self.limit

    @property
    def dropped(self) -> int:
        return self.total - len(self._data)

    def text(self) -> str:
        return _decode(bytes(self._data), cut_front=False)


class StreamFile:
    """A stream's tail kept on disk as it arrives, so that it outlives its supervisor.

    The bytes go to `DIR/<name>.<offset>` (offset: the stream's bytes before that
    file); once a file holds `limit` bytes the next one starts and the one before it
    goes, so at most about twice the limit is kept and no write is ever rewritten
    (a crash loses nothing that reached a file). `read_stream` reads it back.
    """

    def __init__(self, directory: Path, name: str, limit: int) -> None:
        self.directory = directory
        self.name = name
        self.limit = max(0, limit)
        self.total = 0
        self._offsets: list[int] = []
        self._fd: int | None = None
        self._size = 0
        self.broken = False

    def feed(self, data: bytes) -> None:
        """Keep `data`; a file that cannot be written (a full disk) is given up on: the
        outcome still carries the tail its supervisor holds in memory."""
        if data and self.limit and not self.broken:
            try:
                self._write(data)
            except OSError:
                self.broken = True
                self.close()
        self.total += len(data)

    def _write(self, data: bytes) -> None:
        if self._fd is None or self._size >= self.limit:
            self._next_file()
        fd = self._fd
        assert fd is not None  # noqa: S101 - opened just above
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        self._size += len(data)

    def _next_file(self) -> None:
        self.close()
        self._fd = os.open(
            self.directory / f"{self.name}.{self.total}",
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
            0o600,
        )
        self._size = 0
        self._offsets.append(self.total)
        while len(self._offsets) > _KEPT_FILES:
            with contextlib.suppress(OSError):
                (self.directory / f"{self.name}.{self._offsets.pop(0)}").unlink()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_KEPT_FILES = 2


@dataclass(frozen=True, slots=True)
class StreamTail:
    """What `read_stream` found of a stream: its last bytes as text, and what came before."""

    text: str
    dropped: int
    modified_ns: int | None
    """When the stream was last written (None: nothing was)."""


def stream_files(directory: Path, name: str) -> list[tuple[int, Path]]:
    """A stream's files (`StreamFile`), oldest first, with their offsets."""
    found = []
    for path in directory.glob(f"{name}.*"):
        offset = path.name[len(name) + 1 :]
        if offset.isdigit():
            found.append((int(offset), path))
    return sorted(found)


def _own_file(path: Path) -> tuple[bytes, int]:
    """A file's bytes and mtime, when this user owns it (not through a link).

    Raises:
        OSError: it is missing, a link, or another user's: not to be trusted.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as stream:
        status = os.fstat(fd)
        if status.st_uid != os.geteuid():
            raise PermissionError(f"{path} is not this user's")
        return stream.read(), status.st_mtime_ns


def read_stream(directory: Path, name: str, limit: int) -> StreamTail:
    """The last `limit` bytes a `StreamFile` kept, however far its writer got."""
    data = b""
    first: int | None = None
    modified: int | None = None
    for offset, path in stream_files(directory, name)[-_KEPT_FILES:]:
        try:
            chunk, stamp = _own_file(path)
        except OSError:
            continue
        if first is None:
            first = offset
        data += chunk
        modified = stamp if modified is None else max(modified, stamp)
    kept = data[-limit:] if limit > 0 else b""
    dropped = (first or 0) + len(data) - len(kept)
    return StreamTail(_decode(kept, cut_front=dropped > 0), dropped, modified)
