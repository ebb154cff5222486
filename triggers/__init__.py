"""triggers: a cron-style trigger scheduler daemon with an embedded durable runtime."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("triggers")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
