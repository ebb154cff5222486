"""The picture's legend: one entry per kind of thing drawn, in a fixed order, and the
small shapes (handles) that stand for each. matplotlib is imported when one is made."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triggers.timeline._lanes import RUN_OUTCOMES

if TYPE_CHECKING:
    from typing import TypeAlias

    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    Handle: TypeAlias = Patch | Line2D | tuple[Patch, Patch]
    """What stands for one entry: a shape, or a shade with its hatch over it."""

_ORDER = (
    *(f"runs-{outcome}" for outcome in RUN_OUTCOMES),
    "hold",
    "cause",
    "late",
    "range",
    "once",
    "marks",
    "manual",
    "upcoming",
    "dst",
    "life",
    "downtime",
    "future",
    "now",
)
"""Entries by the prefix of their key: runs first, the time after now last."""


class Legend:
    """The entries of what a picture has drawn so far (the first of each key is kept)."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[Handle, str]] = {}

    def add(self, key: str, handle: Handle, label: str) -> None:
        self.entries.setdefault(key, (handle, label))

    def draw(self, figure: Figure) -> None:
        """Below the axes, in columns (nothing when nothing was drawn)."""
        if not self.entries:
            return
        keys = sorted(self.entries, key=_rank)
        legend = figure.legend(
            handles=[self.entries[key][0] for key in keys],
            labels=[self.entries[key][1] for key in keys],
            loc="outside lower center",
            ncols=min(len(keys), 6),
            frameon=False,
            fontsize=8.5,
            handlelength=1.6,
        )
        legend.set_gid("legend")


def _rank(key: str) -> tuple[int, str]:
    for position, prefix in enumerate(_ORDER):
        if key == prefix or key.startswith(f"{prefix}-"):
            return position, key
    return len(_ORDER), key


def patch(colour: str) -> Patch:
    """A filled square (a run bar, the shade after now)."""
    from matplotlib.patches import Patch  # noqa: PLC0415

    return Patch(facecolor=colour, linewidth=0)


def hatched(face: str, hatch: str, pattern: str, *, edge: str | None = None) -> Handle:
    """A shade with its hatch drawn over it (a range, downtime), as the picture draws them."""
    from matplotlib.patches import Patch  # noqa: PLC0415

    shade = Patch(facecolor=face, edgecolor=edge or "none", linewidth=0.6 if edge else 0)
    if not pattern:
        return shade
    return (shade, Patch(facecolor="none", edgecolor=hatch, hatch=pattern, linewidth=0))


def line(colour: str, *, marker: str | None = None, dashed: bool = False) -> Line2D:
    """A marker alone (manual fire, upcoming, a single skip), or a line (now, DST)."""
    from matplotlib.lines import Line2D  # noqa: PLC0415

    if marker is not None:
        return Line2D([], [], linestyle="none", marker=marker, color=colour)
    return Line2D([], [], color=colour, linestyle=(0, (3, 2)) if dashed else "-")


def ring(colour: str) -> Line2D:
    """A hollow circle (a pending occurrence)."""
    from matplotlib.lines import Line2D  # noqa: PLC0415

    return Line2D(
        [],
        [],
        linestyle="none",
        marker="o",
        markerfacecolor="white",
        markeredgecolor=colour,
        markeredgewidth=1.6,
    )
