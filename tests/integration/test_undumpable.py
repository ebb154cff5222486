"""The daemon's process and the step supervisor's are undumpable: a step, which runs as
their user, cannot read their environment (the database URL, the SMTP password) or
memory through /proc.

The check needs a user without privileges: root reads any process's /proc files. So
each case runs, as `nobody` when the tests run as root, a process that makes itself
undumpable with the code the daemon and the supervisor use, then starts a child that
tries its /proc/PID/environ. (tests/e2e/test_step_environment.py has the daemon's own
step try it when the tests run as another user.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """\
    import importlib.util, os, subprocess, sys
    sys.path.insert(0, {root!r})
    how = sys.argv[1]
    if how == "host":
        from looms_runtime.host import forbid_inspection
        assert forbid_inspection()
    elif how == "supervisor":
        spec = importlib.util.spec_from_file_location("supervisor", {supervisor!r})
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module._forbid_inspection()
    done = subprocess.run(
        ["sh", "-c", f"tr '\\\\0' '\\\\n' < /proc/{{os.getpid()}}/environ"],
        capture_output=True, text=True,
    )
    print(done.stdout + done.stderr)
    """
)


def _interpreter() -> list[str]:
    """This Python, as `nobody` when we are root (a venv under /root is not nobody's:
    then the system's Python, which the probe needs nothing beyond)."""
    if os.geteuid() != 0:
        return [sys.executable]
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None or shutil.which("setpriv") is None:
        pytest.skip("as root this needs /usr/bin/python3 and setpriv to run as nobody")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", system]


@pytest.mark.parametrize("how", ["host", "supervisor"])
def test_an_undumpable_process_keeps_its_environment_from_its_own_user(how: str) -> None:
    probe = PROBE.format(
        root=str(ROOT), supervisor=str(ROOT / "looms_runtime" / "_effects" / "supervisor.py")
    )
    env = {"PATH": os.environ["PATH"], "SECRET_OF_THE_DAEMON": "s3cret"}

    def seen(mode: str) -> str:
        done = subprocess.run(
            [*_interpreter(), "-c", probe, mode],
            capture_output=True,
            text=True,
            env=env,
            cwd="/",
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "SECRET_OF_THE_DAEMON=s3cret" in seen("plain")  # what a step could read before
    undumpable = seen(how)
    assert "s3cret" not in undumpable
    assert "Permission denied" in undumpable
