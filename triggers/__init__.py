"""triggers: a cron-style trigger scheduler daemon with an embedded durable runtime."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    # Read from the installed metadata on first use only: importlib.metadata costs a
    # command line that never shows the version a noticeable part of its start-up.
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        found = version("triggers")
    except PackageNotFoundError:  # a source tree that was never installed
        found = "0.0.0"
    globals()["__version__"] = found
    return found
