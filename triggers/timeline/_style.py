"""How each thing looks: one colour per outcome (Okabe-Ito, readable by the colour
blind), the terminal's glyphs, the hatch of each reason, and the legend's words."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Look:
    """The colour (SVG/PNG), glyph and ANSI colour (terminal) of one kind of thing."""

    colour: str
    glyph: str
    ansi: str
    words: str


LOOKS: dict[str, Look] = {
    "completed": Look("#009E73", "█", "32", "run completed"),
    "failed": Look("#D55E00", "✗", "31;1", "run failed"),
    "cancelled": Look("#7F7F7F", "⊘", "90", "run cancelled"),
    "superseded": Look("#CC79A7", "≫", "35", "superseded"),
    "launched": Look("#0072B2", "▓", "34;1", "running"),
    "launching": Look("#56B4E9", "◌", "36", "launching"),
    "buffered": Look("#56B4E9", "◌", "36", "buffered"),
    "skipped": Look("#E69F00", "░", "33", "skipped"),
    "missed": Look("#8E44AD", "▒", "35", "missed"),
}
"""By ledger outcome."""

MANUAL = Look("#1A1A1A", "◆", "1", "manual fire")
WAITING = Look("#FFFFFF", "┄", "34", "waiting (signal, timer)")
"""Drawn hollow over its run's bar (the run's colour as the outline), striped."""
PARKED = Look("#F0E442", "▚", "33;1", "parked (awaits an operator)")
RETIRED = Look("#6B6B6B", "┤", "90", "retired")
RETIRED_SPAN = Look("#6B6B6B", "╌", "90", "retired (not declared)")
REVIVED = Look("#009E73", "┣", "32", "revived")
CREATED = Look("#0072B2", "├", "34", "created")
LATE = Look("#404040", "◇", "90", "occurrence of a later run (backfill, catch-up)")
CAUSE = Look("#333333", "→", "1", "caused the run (after:)")
UPCOMING = Look("#7FA7CF", "·", "36", "upcoming")
DOWNTIME = Look("#5A5A5A", "━", "90", "daemon down")
DST = Look("#4D4D4D", "┆", "90", "DST change")
NOW = Look("#C0392B", "▼", "31", "now")
FUTURE_SHADE = "#EEF3FA"
LANE_SHADE = "#F7F7F7"

HATCHES = {
    "overlap": "",
    "paused": "//",
    "disabled": "xx",
    "catchup_policy": "\\\\",
    "catchup_window": "..",
    "buffer_full": "++",
    "max_runs": "--",
    "blocked": "oo",
    "calendar": "||",
    "pool_full": "==",
}
"""By reason, on the shade of a skipped or missed range: the reason without a label."""

PRIORITY = (
    "failed",
    "cancelled",
    "superseded",
    "manual",
    "retired",
    "revived",
    "parked",
    "waiting",
    "launched",
    "completed",
    "created",
    "launching",
    "buffered",
    "missed",
    "skipped",
    "late",
    "upcoming",
    "dst",
    "retired-span",
)
"""In a terminal cell that holds several things, the first of these wins."""


def look(kind: str) -> Look:
    """The look of an outcome or of `manual`, `upcoming`, `dst`, `waiting`, `parked`,
    `late` (a backfilled occurrence), a milestone, `retired-span`."""
    special = {
        "manual": MANUAL,
        "upcoming": UPCOMING,
        "dst": DST,
        "waiting": WAITING,
        "parked": PARKED,
        "late": LATE,
        "retired": RETIRED,
        "revived": REVIVED,
        "created": CREATED,
        "retired-span": RETIRED_SPAN,
    }
    return special.get(kind) or LOOKS[kind]
