"""Bounded capture of an effect's output: the tail of a stream, or the head of a body."""

from __future__ import annotations

from collections import deque

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
