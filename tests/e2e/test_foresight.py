"""The installed CLI's `next` and `simulate`: what they print, and what they never touch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import Cli
from tests.svg_picture import ids, parse, texts

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

DECLARATIONS = """\
version: 1
flows:
  noop: {steps: []}
triggers:
  - {id: backup, flow: noop, cron: "30 2 * * *", timezone: Europe/Berlin}
  - {id: hourly, flow: noop, every: 1h}
  - {id: off, flow: noop, every: 1h, enabled: false}
  - {id: gone, flow: noop, every: 1h}
"""


def _file(tmp_path: Path, text: str = DECLARATIONS, name: str = "triggers.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_simulate_prints_the_rows_history_prints_and_opens_no_store(
    cli: Cli, tmp_path: Path
) -> None:
    path = _file(tmp_path)
    cli.run("apply", str(path))
    cli.run("fire", "hourly", "--key", "one")
    [stored] = cli.json("history")
    store = Path(cli.database_url.removeprefix("sqlite:///"))
    before = store.stat().st_mtime_ns

    for url in ("notaurl", f"sqlite:///{tmp_path}/no/such/dir/t.sqlite", cli.database_url):
        cli.env["TRIGGERS_DATABASE_URL"] = url
        result = cli.run(
            "simulate",
            str(path),
            "--from",
            "2027-03-27",
            "--to",
            "+2d",
            "--down",
            "+1d..+1d3h",
            "--json",
        )
        rows = json.loads(result.stdout)
        assert result.stderr == ""
        # The same keys, in order, but the trigger's `retirement` and `revival`, which
        # history adds to its rows and a simulation does not know.
        kept = tuple(k for k in stored if k not in ("retirement", "revival"))
        assert {tuple(row) for row in rows} == {kept}
    assert not (tmp_path / "no").exists()
    assert store.stat().st_mtime_ns == before

    outcomes = {(row["trigger_id"], row["outcome"], row["reason"]) for row in rows}
    assert ("hourly", "missed", "catchup_policy") in outcomes
    assert ("off", "skipped", "disabled") in outcomes
    backup = [row["occurrence"] for row in rows if row["trigger_id"] == "backup"]
    assert backup == ["2027-03-27T01:30:00.000Z", "2027-03-28T01:00:00.000Z"]  # 03:00 CEST


def test_simulate_says_what_it_simulated_and_refuses_a_bad_option(cli: Cli, tmp_path: Path) -> None:
    path = _file(tmp_path)
    table = cli.run("simulate", str(path), "--from", "2027-03-27", "--to", "+6h").stdout
    assert table.splitlines()[0].split()[:3] == ["OCCURRENCE", "TRIGGER", "OUTCOME"]
    assert table.splitlines()[-1].startswith(
        "simulated 2027-03-27T00:00:00.000Z .. 2027-03-27T06:00:00.000Z: 19 occurrences ("
    )

    bad = cli.run(
        "simulate",
        str(path),
        "--from",
        "2027-03-27",
        "--to",
        "+1d",
        "--pause",
        "nope@+1h..",
        "--json",
        check=False,
    )
    assert (bad.returncode, bad.stdout) == (2, "")
    error = json.loads(bad.stderr)["error"]
    assert error["code"] == "TRG-110" and "--pause nope@" in error["message"]


def test_next_and_list_say_why_a_trigger_fires_nothing(cli: Cli, tmp_path: Path) -> None:
    cli.run("apply", str(_file(tmp_path)))
    cli.run(
        "apply",
        str(_file(tmp_path, DECLARATIONS.replace("  - {id: gone, flow: noop, every: 1h}\n", ""))),
    )
    cli.run("pause", "hourly", "--note", "maintenance")

    assert cli.json("next", "hourly") == []
    assert cli.run("next", "hourly").stdout == (
        "hourly: no next fire: paused (maintenance); `triggers resume hourly` restarts it\n"
    )
    assert cli.run("next", "off").stdout.endswith(
        "no next fire: disabled (enabled: false in its declaration)\n"
    )
    assert "retired" in cli.run("next", "gone").stdout
    listed = {row["id"]: row for row in cli.json("list")}
    assert {
        i: (r["next_fire"], r["no_next_fire_reason"]) for i, r in listed.items() if i != "backup"
    } == {
        "hourly": (None, "paused"),
        "off": (None, "disabled"),
        "gone": (None, "retired"),
    }
    assert listed["backup"]["next_fire"] is not None
    [first] = cli.json("next", "backup", "-n", "1", "--after", "2027-03-27T12:00:00Z")
    assert (first["occurrence"], first["dst"]) == ("2027-03-28T01:00:00.000Z", "moved")


def test_simulate_draws_its_ledger_as_a_timeline(cli: Cli, tmp_path: Path) -> None:
    path = _file(tmp_path)
    picture = tmp_path / "forecast.svg"

    result = cli.run(
        "simulate", str(path), "--from", "2027-03-27", "--to", "+2d",
        "--down", "+1d..+1d3h", "--timeline", str(picture), "--json",
    )  # fmt: skip

    rows = json.loads(result.stdout)
    root = parse(picture.read_bytes())
    found = ids(root)
    assert "downtime-0" in found and "now" not in found  # a forecast has no "now"
    lanes = {name: texts(root, f"label-{n}") for n, name in enumerate(["backup", "hourly"])}
    assert lanes == {"backup": ["backup"], "hourly": ["hourly"]}
    assert any(gid.startswith("runs-completed-") for gid in found)
    assert {"hourly", "backup"} <= {row["trigger_id"] for row in rows}

    refused = cli.run(
        "simulate", str(path), "--from", "2027-03-27", "--to", "+2d",
        "--timeline", str(tmp_path / "forecast.pdf"), check=False,
    )  # fmt: skip
    assert refused.returncode == 2 and "must end in .svg or .png" in refused.stderr
    assert not (tmp_path / "forecast.pdf").exists()
