"""A trigger removed from the declarations stays accounted for: `history` and `describe`
say when it was retired, by which apply and revision, and when it came back."""

from __future__ import annotations

import getpass
import json
import signal
import textwrap
from pathlib import Path

import pytest

from tests.e2e.conftest import Cli, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

BOTH = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
    triggers:
      - {id: report, flow: noop, cron: "0 6 * * *"}
      - {id: cleanup, flow: noop, every: 1h}
    """
)
WITHOUT_REPORT = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
    triggers:
      - {id: cleanup, flow: noop, every: 1h}
    """
)
REPORT_BACK = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
    triggers:
      - {id: report, flow: noop, cron: "30 6 * * *"}
      - {id: cleanup, flow: noop, every: 1h}
    """
)


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    paths = tmp_path / "both.yaml", tmp_path / "without.yaml", tmp_path / "back.yaml"
    for path, text in zip(paths, (BOTH, WITHOUT_REPORT, REPORT_BACK), strict=True):
        path.write_text(text)
    return paths


def test_history_and_describe_say_retired_by_which_apply_when_a_trigger_is_removed(
    cli: Cli, tmp_path: Path
) -> None:
    both, without, _ = _files(tmp_path)
    cli.run("apply", str(both))
    cli.run("fire", "report")
    cli.run("apply", str(without), "--note", "report moved to the new host")
    user = getpass.getuser()

    rows = cli.json("history", "report")
    assert [row["outcome"] for row in rows] == ["launching"]
    retirement = rows[0]["retirement"]
    assert retirement["event"] == "retired"
    assert retirement["revision"] == 1
    assert retirement["user"] == user
    assert retirement["note"] == "report moved to the new host"
    assert retirement["at"] > rows[0]["occurrence"]
    assert rows[0]["revival"] is None
    assert all(row["retirement"] is None for row in cli.json("history", "cleanup"))

    table = cli.run("history", "report").stdout.splitlines()
    assert table[1].startswith(f"-- report retired at {retirement['at']} by apply (revision 1,")
    assert f"by {user}@" in table[1]
    assert "report moved to the new host" in table[1]
    assert "report" in table[2]
    assert table[2].split()[2] == "launching"
    assert table[3].startswith("-- report created at ")
    # A window that starts after the retirement holds no row, and says why.
    later = cli.run("history", "report", "--since", "now").stdout.splitlines()
    assert later[1:] == [table[1]]

    whole = cli.json("describe", "report")
    assert whole["state"] == "retired"
    assert whole["retirement"] == retirement
    assert [event["event"] for event in whole["lifecycle"]] == ["retired", "created"]
    text = cli.run("describe", "report").stdout
    assert f"  retired at {retirement['at']} by apply (revision 1, by {user}@" in text

    listed = {row["id"]: row for row in cli.json("list")}
    assert listed["report"]["state"] == "retired"


def test_history_and_describe_say_revived_with_the_new_revision_when_it_comes_back(
    cli: Cli, tmp_path: Path
) -> None:
    both, without, back = _files(tmp_path)
    cli.run("apply", str(both))
    cli.run("fire", "report")
    cli.run("apply", str(without))
    cli.run("apply", str(back))

    rows = cli.json("history", "report")
    assert rows[0]["retirement"] is None
    revival = rows[0]["revival"]
    assert revival["event"] == "revived"
    assert revival["revision"] == 2  # the schedule changed as it came back
    whole = cli.json("describe", "report")
    assert whole["state"] == "enabled"
    assert [(e["event"], e["revision"]) for e in whole["lifecycle"]] == [
        ("revived", 2),
        ("retired", 1),
        ("created", 1),
    ]
    table = cli.run("history", "report").stdout.splitlines()
    assert [line.split(" at ")[0] for line in table if line.startswith("--")] == [
        "-- report revived",
        "-- report retired",
        "-- report created",
    ]
    assert (
        f"  revived at {revival['at']} by apply (revision 2, by "
        in cli.run("describe", "report").stdout
    )


def test_history_of_an_id_that_never_existed_is_refused(cli: Cli, tmp_path: Path) -> None:
    both, _, _ = _files(tmp_path)
    cli.run("apply", str(both))
    result = cli.run("history", "nope", check=False)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "no trigger 'nope'" in result.stderr


BEATING = textwrap.dedent(
    """\
    version: 1
    flows:
      noop: {steps: []}
    triggers:
      - {id: beat, flow: noop, every: 1s}
      - {id: pulse, flow: noop, every: 1s}
    """
)


def _history(cli: Cli, trigger_id: str) -> list[dict[str, object]]:
    result = cli.run("history", trigger_id, "--json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else []


def test_a_daemon_reload_that_drops_a_trigger_is_named_as_its_retirement(
    cli: Cli, tmp_path: Path
) -> None:
    config = tmp_path / "t.yaml"
    config.write_text(BEATING)
    daemon = cli.daemon(config, tmp_path / "d.log")
    try:
        wait_for(
            lambda: any(r["outcome"] == "completed" for r in _history(cli, "beat")),
            timeout=60,
            what="beat's first run",
        )
        config.write_text(BEATING.replace("  - {id: beat, flow: noop, every: 1s}\n", ""))
        daemon.send_signal(signal.SIGHUP)
        rows = wait_for(
            lambda: [r for r in _history(cli, "beat") if r["retirement"]],
            timeout=60,
            what="beat's retirement",
        )
        retirement = rows[0]["retirement"]
        assert isinstance(retirement, dict)
        assert "at reload" in str(retirement["note"])  # the daemon's own apply
        # pulse goes on firing; beat's ledger stays silent once its retirement is in force.
        decided = {r["occurrence"] for r in _history(cli, "beat")}
        seen_at = max(str(o) for o in decided)
        wait_for(
            lambda: sum(str(r["occurrence"]) > seen_at for r in _history(cli, "pulse")) >= 3,
            timeout=60,
            what="pulses after the retirement",
        )
        assert {r["occurrence"] for r in _history(cli, "beat")} == decided
        table = cli.run("history", "beat", "--since", "now").stdout.splitlines()
        assert table[1].startswith(f"-- beat retired at {retirement['at']} by apply (revision 1,")
        assert "at reload" in table[1]
    finally:
        assert stop(daemon) == 0
