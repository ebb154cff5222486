"""A picture of fires over time: a pure function from ledger rows to SVG, PNG or text.

The renderers read nothing but their argument (no store, no clock, no settings),
so a ledger from the store (`triggers timeline`) and one from a simulation draw
alike::

    from triggers.timeline import Downtime, Timeline, render_file, render_text

    picture = Timeline(
        since=since, until=until, now=now,    # aware datetimes; now=None: no "now"
        rows=rows,                            # dicts shaped as `history --json` prints
        downtime=[Downtime(started_at=a, ended_at=b)],
        upcoming={"nightly-backup": [next_fire_at]},
        trigger_ids=["nightly-backup"],       # lane order (others in rows follow)
        trigger_zones={"nightly-backup": "Europe/Berlin"},  # DST changes drawn from it
    )
    render_file(picture, Path("out.svg"))     # or .png: by the extension
    print(render_text(picture, width=100))    # the terminal's rendering

What each lane shows: runs as bars from launch to settlement coloured by outcome
(a run still going lasts until now), skipped and missed occurrences shaded from
the first to the last of a range and hatched by reason (labelled in words where
wide enough), pending occurrences (`launching`, `buffered`) and superseded ones
that never ran as rings, manual fires as a mark above their run, upcoming fires
after now as light ticks, and the offset changes of the trigger's zone as dashed
lines; given `branches` (per run id, its steps as `runs show` lists them), a run's
steps as thin bars under its bar, so a graph flow's branches show side by side.
Daemon downtime is hatched across every lane; the time after now is lighter.
`render_svg`, `render_png` and `render_text` return the picture;
`render_file` writes it. matplotlib is imported only when a picture is drawn, and is
an optional dependency (`pip install 'triggers[pictures]'`; `pictures_available`);
`render_web_svg` draws the same lanes as plain SVG markup without it (a web page's).
"""

from __future__ import annotations

from pathlib import Path

from triggers.errors import OutputFileError
from triggers.timeline._input import Branch, Downtime, DstChange, LifeMark, Timeline
from triggers.timeline._lanes import PARKED_STATE, WAITING_STATES, Lane, lanes
from triggers.timeline._plot import pictures_available, render_png, render_svg
from triggers.timeline._text import render_text
from triggers.timeline._web import render_web_svg
from triggers.timeline._zones import dst_changes

__all__ = [
    "PARKED_STATE",
    "PICTURE_SUFFIXES",
    "WAITING_STATES",
    "Branch",
    "Downtime",
    "DstChange",
    "Lane",
    "LifeMark",
    "Timeline",
    "check_destination",
    "dst_changes",
    "lanes",
    "picture_kind",
    "pictures_available",
    "render_file",
    "render_png",
    "render_svg",
    "render_text",
    "render_web_svg",
]

PICTURE_SUFFIXES = (".svg", ".png")


def picture_kind(path: Path) -> str:
    """`svg` or `png`, by the file name's extension (any case).

    Raises:
        OutputFileError: another extension.
    """
    suffix = path.suffix.lower()
    if suffix not in PICTURE_SUFFIXES:
        raise OutputFileError(
            f"cannot tell the picture's format from {str(path)!r}: "
            "the file name must end in .svg or .png",
            path=str(path),
        )
    return suffix[1:]


def check_destination(path: Path) -> str:
    """`svg` or `png` for a picture file that can be written: a known extension, in a
    directory that exists (checked before any work, so a typo fails at once).

    Raises:
        OutputFileError: an unknown extension, or no such directory.
        ConfigError: matplotlib, which draws pictures, is not installed.
    """
    kind = picture_kind(path)
    pictures_available(raise_missing=True)
    if not path.parent.is_dir():
        raise OutputFileError(
            f"cannot write {str(path)!r}: no directory {str(path.parent)!r}", path=str(path)
        )
    return kind


def render_file(timeline: Timeline, path: Path) -> int:
    """Write `timeline` to `path` as SVG or PNG (by its extension); returns the bytes
    written. The file is written whole or not at all (a temporary file, renamed).

    Raises:
        OutputFileError: an unknown extension, or the file cannot be written (its
            directory is missing or not writable).
        ValueError: a malformed ledger row.
    """
    kind = picture_kind(path)
    data = render_svg(timeline) if kind == "svg" else render_png(timeline)
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_bytes(data)
        partial.replace(path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise OutputFileError(
            f"cannot write {str(path)!r}: {exc.strerror or exc}", path=str(path)
        ) from None
    return len(data)
