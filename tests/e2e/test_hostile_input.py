"""Hostile declarations against the installed CLI and the running daemon.

A flow list nested 50,000 deep once made `validate` die of a segfault (exit 139) and a
daemon reloading it vanish without a log line; nine levels of nine aliases held `apply`
for minutes. Now each is exit 2 naming the file, the line and the limit, with the store
unchanged, and a daemon keeps its last good declarations.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.e2e.conftest import Cli, log_events, stop, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

GOOD = "version: 1\nflows:\n  noop: {steps: []}\ntriggers:\n  - {id: kept, flow: noop, every: 1h}\n"
DEEP = "version: 1\nflows: " + "[" * 50_000 + "]" * 50_000 + "\n"
LAUGHS = "\n".join(
    [
        "version: 1",
        "a0: &a0 [lol]",
        *(f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 10)),
        "flows: {}",
        "",
    ]
)


def _ids(cli: Cli) -> list[str]:
    result = cli.run("list", "--json", check=False)  # exit 78 until the daemon made the file
    if result.returncode != 0:
        return []
    return [row["id"] for row in json.loads(result.stdout) if not row["retired"]]


@pytest.mark.parametrize(
    ("text", "line", "limit"),
    [(DEEP, 2, "nested over the limit of 64 levels"), (LAUGHS, 8, "aliases repeat over")],
    ids=["50000-deep", "billion-laughs"],
)
def test_validate_and_apply_refuse_a_hostile_file_with_exit_2(
    cli: Cli, tmp_path: Path, text: str, line: int, limit: str
) -> None:
    (tmp_path / "good.yaml").write_text(GOOD)
    cli.run("apply", str(tmp_path / "good.yaml"))
    hostile = tmp_path / "hostile.yaml"
    hostile.write_text(text)
    for command in ("validate", "apply"):
        result = cli.run(command, str(hostile), "--json", check=False)
        assert result.returncode == 2, result.stderr[-2000:]
        assert result.stdout == ""
        [found] = json.loads(result.stderr)["error"]["details"]["problems"]
        assert (found["file"], found["line"]) == (str(hostile), line)
        assert limit in found["message"]
    assert _ids(cli) == ["kept"]  # the store is as it was


def test_daemon_reloading_a_50000_deep_file_keeps_its_last_good_declarations(
    cli: Cli, tmp_path: Path
) -> None:
    config = tmp_path / "t.yaml"
    config.write_text(GOOD)
    log = tmp_path / "d.log"
    daemon = cli.daemon(config, log)
    try:
        wait_for(lambda: _ids(cli) == ["kept"] or None, timeout=60, what="the declarations")
        config.write_text(DEEP)
        daemon.send_signal(signal.SIGHUP)
        refused = wait_for(
            lambda: [e for e in log_events(log) if e["event"] == "declarations_refused"],
            timeout=60,
            what="the refusal",
        )
        [found] = refused[0]["problems"]
        assert (found["file"], found["line"]) == (str(config), 2)
        assert "limit of 64 levels" in found["message"]
        assert daemon.poll() is None, "a hostile reload must not stop the daemon"
        assert _ids(cli) == ["kept"]
    finally:
        assert stop(daemon) == 0
