"""The wheel built from this tree, as `pip install /path/to/checkout` builds it (in
an isolated environment with only the build's requirements): plain Python for every
platform, with the migrations inside, and `simulate` running on it as in the checkout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("wheel"), pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
YAML = """\
version: 1
flows:
  report: {steps: [{id: build, run: [report]}]}
triggers:
  - {id: hourly-report, flow: report, cron: "0 * * * *"}
  - {id: nightly, flow: report, cron: "30 2 * * *", timezone: Europe/Berlin}
"""
PROBE = """
import sys
import triggers.scheduler.engine, triggers.model
print(triggers.scheduler.engine.__file__)
print(triggers.model.__file__)
from triggers.cli import main
main(sys.argv[1:])
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"
    # The tree as committed and changed, without what a checkout built in place.
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((ROOT / name).read_bytes())
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        check=False,
        capture_output=True,
        text=True,
        timeout=800,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    [made] = out.glob("triggers-*.whl")
    return made


def test_the_wheel_is_plain_python_with_its_migrations(wheel: Path) -> None:
    assert wheel.name.endswith("-py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert not [name for name in names if name.endswith((".so", ".c", ".pyd"))]
    assert "triggers/scheduler/engine.py" in names
    assert "looms_runtime/py.typed" in names and "triggers/py.typed" in names
    assert any(name.startswith("triggers/_migrations/versions/") for name in names)


def test_simulate_runs_on_the_wheel_to_the_end(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    declarations = tmp_path / "triggers.yaml"
    declarations.write_text(YAML)
    command = ["simulate", str(declarations), "--from", "2027-03-27T00:00:00Z"]
    command += ["--to", "2027-04-27T00:00:00Z", "--json"]
    # The wheel's package first; its dependencies from this environment.
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONFAULTHANDLER": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *command],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    engine, model, *rest = done.stdout.splitlines()
    assert engine.startswith(str(target)) and engine.endswith(".py")
    assert model.startswith(str(target)) and model.endswith(".py")
    ledger = json.loads("\n".join(rest))
    # The same ledger as this checkout's own build writes, row for row.
    here = subprocess.run(
        [sys.executable, "-c", "from triggers.cli import main; main()", *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert ledger == json.loads(here.stdout)
    assert sum(row["trigger_id"] == "nightly" for row in ledger) == 31  # 28 March moved
