"""`triggers timeline --output` end to end, for what a picture must not hide: a real
daemon runs a dependent trigger after its upstream, a run waiting for a signal, a
backfill, three manual fires at once and a trigger retired and revived by `apply`."""

from __future__ import annotations

import re
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Cli, stop, wait_for
from tests.svg_picture import SVG, element, ids, parse, texts
from triggers.clock import iso

# One worker runs the module (`--dist loadgroup`): its module-scoped daemon and
# ledger are built once, not once on each worker that gets one of its tests.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(240),
    pytest.mark.xdist_group("timeline_picture"),
]

DECLARED = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
      load: {steps: [{id: go, run: [/bin/true]}]}
      gate:
        steps:
          - {id: gate, wait_signal: {name: go, timeout: 30m}}
    triggers:
      - {id: upstream, flow: load, every: 2s}
      - {id: downstream, flow: noop, after: {trigger: upstream, outcome: completed}}
      - {id: gated, flow: gate, every: 1d}
      - {id: doomed, flow: noop, every: 1d}
    """
)
WITHOUT_DOOMED = DECLARED.replace("  - {id: doomed, flow: noop, every: 1d}\n", "")
assert WITHOUT_DOOMED != DECLARED


def _rows(cli: Cli, trigger_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = cli.json("history", trigger_id, "--limit", "1000")
    return rows


@pytest.fixture(scope="module")
def picture(tmp_path_factory: pytest.TempPathFactory) -> tuple[Cli, dict[str, Any], Path]:
    workdir = tmp_path_factory.mktemp("picture")
    cli = Cli(f"sqlite:///{workdir / 'triggers.sqlite'}", workdir)
    config = workdir / "triggers.yaml"
    config.write_text(DECLARED)
    started = datetime.now(UTC)
    cli.run("apply", str(config))
    daemon = cli.daemon(config, workdir / "daemon.log")
    try:
        wait_for(
            lambda: any(r["outcome"] == "completed" for r in _rows(cli, "downstream")),
            timeout=60,
            what="a dependent run",
        )
        cli.run("fire", "gated", "--key", "wait")
        for key in ("one", "two", "three"):
            cli.run("fire", "doomed", "--key", key)
        past = started - timedelta(minutes=5)
        cli.run(
            "backfill", "upstream", "--from", iso(past), "--to", iso(past + timedelta(seconds=5))
        )
        wait_for(
            lambda: any(
                r["launched_at"] and r["occurrence"] < iso(started) for r in _rows(cli, "upstream")
            ),
            timeout=60,
            what="the backfill's runs",
        )
        wait_for(
            lambda: sum(1 for r in _rows(cli, "doomed") if r["settled_at"]) >= 3,
            timeout=60,
            what="the manual fires",
        )
        config.write_text(WITHOUT_DOOMED)
        cli.run("apply", str(config))
        config.write_text(DECLARED)
        cli.run("apply", str(config))
    finally:
        assert stop(daemon) == 0
    since = iso(started - timedelta(minutes=6))
    out = workdir / "picture.svg"
    cli.run("timeline", "--since", since, "--output", str(out))
    cli.run("timeline", "--since", since, "--output", str(workdir / "picture.png"))
    linked = workdir / "linked.svg"
    cli.run("timeline", "--since", since, "-o", str(linked), "--links", "/runs/{run_id}")
    return cli, cli.json("timeline", "--since", since), out


def _lane(document: dict[str, Any], trigger_id: str) -> int:
    return [t["id"] for t in document["triggers"]].index(trigger_id)


def test_a_retired_and_revived_trigger_says_so_on_its_lane(
    picture: tuple[Cli, dict[str, Any], Path],
) -> None:
    _, document, out = picture
    doomed = document["triggers"][_lane(document, "doomed")]
    assert [mark["event"] for mark in doomed["lifecycle"]] == ["created", "retired", "revived"]
    root = parse(out.read_bytes())
    lane = _lane(document, "doomed")
    words = [
        "".join(node.itertext())
        for gid in sorted(i for i in ids(root) if i.startswith(f"life-label-{lane}-"))
        for node in element(root, gid).iter(f"{SVG}text")
    ]
    # Seconds apart: one label names them in turn rather than three overlapping.
    assert " → ".join(words) == "created → retired → revived"
    assert f"retired-{lane}" in ids(root)


def test_a_waiting_run_a_backfill_manual_fires_and_a_dependent_run_are_drawn_as_such(
    picture: tuple[Cli, dict[str, Any], Path],
) -> None:
    _, document, out = picture
    root = parse(out.read_bytes())
    found = ids(root)
    assert f"waiting-{_lane(document, 'gated')}" in found
    assert f"late-{_lane(document, 'upstream')}" in found
    doomed = _lane(document, "doomed")
    counted = [
        "".join(node.itertext())
        for gid in found
        if gid.startswith(f"manual-count-{doomed}-")
        for node in element(root, gid).iter(f"{SVG}text")
    ]
    assert counted == ["×3"]  # noqa: RUF001
    arrows = sorted(gid for gid in found if gid.startswith("cause-"))
    assert arrows, "no arrow from an upstream run to its dependent"
    [tip] = [n.text for n in element(root, arrows[0]).iter(f"{SVG}title")]
    assert tip is not None and tip.startswith("run ") and " caused run " in tip
    legend = texts(root, "legend")
    for words in ("waiting (signal, timer)", "caused the run (after:)", "manual fire"):
        assert words in legend
    assert (out.parent / "picture.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_with_links_each_run_is_a_link_to_its_run_with_a_tooltip(
    picture: tuple[Cli, dict[str, Any], Path],
) -> None:
    cli, _, out = picture
    text = (out.parent / "linked.svg").read_text()
    links = re.findall(r'<a href="/runs/([^"]+)" xlink:href="[^"]+"><title>run ([^ <]+) ', text)
    assert links and all(href == run_id for href, run_id in links)
    assert "<a " not in out.read_text()  # without --links: no links
    for args, message in (
        (["-o", str(out.parent / "x.svg"), "--links", "/runs/all"], "must hold {run_id}"),
        (["--links", "/runs/{run_id}"], "in an SVG file only"),
    ):
        done = cli.run("timeline", *args, check=False)
        assert done.returncode == 2 and message in done.stderr and done.stdout == ""
