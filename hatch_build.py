"""The modules compiled to C with mypyc, and the build that compiles them.

The path every occurrence takes (the loop's tick, the claim on the memory store, the
run's end, the schedule math) is compiled to C by mypyc from the same annotated
source: `triggers simulate` runs about four times as fast (a daemon's fire spends
its time in SQL, the runtime and the step, which stay Python). Every module also
runs as plain Python, unchanged; compiled, it checks at run time the types its
annotations declare (docs/architecture.md, "Compiled modules").

    python hatch_build.py            # compile NATIVE in place (`make native`)
    python hatch_build.py --check    # exit 1 naming a compiled module older than its source
    python hatch_build.py --clean    # remove the compiled modules: plain Python again

In a checkout the compiled modules sit beside their sources (`make native`, which
`make run` and `make test` run first), and Python imports a compiled
module before its source: a source edited after `make native` is not what runs
until it is compiled again; `--check` (and the test suite's start) says so.

A wheel built from this tree (`pip install .`, `python -m build`) compiles them
through hatchling's build hook below: the build's requirements (pyproject.toml)
bring mypyc and the libraries the compiled modules import, for their types. Where
the compile fails (no C compiler), or with `TRIGGERS_PURE_PYTHON=1`, the wheel is
plain Python. `tests/e2e/test_wheel.py` builds one and runs `simulate` on it.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
GROUP = "triggers_native"
# The modules an occurrence crosses in the loop and in `simulate`.
NATIVE = (
    "triggers/scheduler/_cron.py",
    "triggers/scheduler/_cron_days.py",
    "triggers/scheduler/_dst.py",
    "triggers/scheduler/_intervals.py",
    "triggers/scheduler/_timeline.py",
    "triggers/scheduler/dispatch.py",
    "triggers/scheduler/engine.py",
    "triggers/scheduler/health.py",
    "triggers/scheduler/launcher.py",
    "triggers/scheduler/monitor.py",
    "triggers/scheduler/occurrences.py",
    "triggers/scheduler/timetable.py",
    "triggers/store/_decide.py",
    "triggers/store/_memory_claims.py",
    "triggers/store/_memory_ledger.py",
    "triggers/store/_memory_lookups.py",
    "triggers/store/_memory_rows.py",
    "triggers/store/memory.py",
    "triggers/runner/simulated.py",
    "triggers/runner/protocol.py",
    "triggers/model.py",
    "triggers/store/protocol.py",
    "triggers/clock.py",
    "triggers/scheduler/pending.py",
    "triggers/scheduler/listing.py",
    "triggers/scheduler/forecast.py",
    "triggers/scheduler/division.py",
    "triggers/simulation/_scenario.py",
    "triggers/metrics.py",
    "triggers/simulation/_driver.py",
)
_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def compiled_path(source: str) -> Path:
    return ROOT / (source.removesuffix(".py") + _SUFFIX)


def _group_path() -> Path:
    return ROOT / f"{GROUP}__mypyc{_SUFFIX}"


def stale() -> list[str]:
    """The compiled modules older than their sources (none when nothing is compiled)."""
    found = []
    for source in NATIVE:
        target = compiled_path(source)
        if target.exists() and target.stat().st_mtime < (ROOT / source).stat().st_mtime:
            found.append(source)
    return found


def build(target_dir: Path, *, inplace: bool) -> list[Path]:
    """Compile NATIVE; return the extension files written (under `target_dir`, or
    beside the sources when `inplace`)."""
    # Only a build needs them (and a wheel's build environment has them). setuptools
    # warns that its `install` command is deprecated: this build never runs it.
    warnings.filterwarnings("ignore", message="setup.py install is deprecated")
    from mypyc.build import mypycify  # noqa: PLC0415
    from setuptools import Distribution  # type: ignore[import-untyped]  # noqa: PLC0415

    # Not the project's mypy configuration: its pydantic plugin needs pydantic, which
    # no compiled module imports. The libraries they import are in the build's
    # requirements (pyproject.toml): compiled against a library it could not see, a
    # subclass of one of its classes crashed the garbage collector.
    options = ["--config-file=", "--ignore-missing-imports", "--python-version=3.11"]
    extensions = mypycify([*options, *NATIVE], opt_level="3", group_name=GROUP)
    distribution = Distribution({"name": "triggers", "ext_modules": extensions})
    command = distribution.get_command_obj("build_ext")
    command.inplace = inplace
    command.build_lib = str(target_dir)
    command.build_temp = str(ROOT / "build" / "native")
    command.parallel = os.cpu_count() or 1
    distribution.run_command("build_ext")
    outputs = [Path(path) for path in command.get_outputs()]
    # build_ext leaves an extension whose C did not change as it was (a module's
    # shim, when only the shared library changed): every output is of this build.
    for path in outputs:
        path.touch()
    return outputs


def clean() -> None:
    for source in NATIVE:
        compiled_path(source).unlink(missing_ok=True)
    _group_path().unlink(missing_ok=True)


def main(argv: list[str]) -> int:
    os.chdir(ROOT)
    if argv == ["--check"]:
        old = stale()
        for source in old:
            sys.stderr.write(f"{source}: compiled before its last change; run `make native`\n")
        return 1 if old else 0
    if argv == ["--clean"]:
        clean()
        return 0
    if argv:
        sys.stderr.write(__doc__ or "")
        return 2
    if os.environ.get("TRIGGERS_PURE_PYTHON") == "1":
        clean()
        sys.stderr.write("triggers: TRIGGERS_PURE_PYTHON=1: plain Python, nothing compiled\n")
        return 0
    try:
        build(ROOT, inplace=True)
    except (Exception, SystemExit) as error:  # noqa: BLE001 - a build tool's failures vary
        clean()  # nothing half-built stays beside the sources
        sys.stderr.write(
            f"triggers: compiling with mypyc failed ({error}); plain Python runs the same "
            "code: TRIGGERS_PURE_PYTHON=1 make ... skips compiling\n"
        )
        return 1
    return 0


try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script, without hatchling
    pass
else:

    class NativeBuildHook(BuildHookInterface):  # type: ignore[misc]
        """Compile NATIVE into a standard wheel (see the module doc)."""

        def initialize(self, version: str, build_data: dict[str, Any]) -> None:
            if self.target_name != "wheel" or version == "editable":
                return
            if os.environ.get("TRIGGERS_PURE_PYTHON") == "1":
                return
            out = Path(self.directory) / "native"
            try:
                outputs = build(out, inplace=False)
            except (Exception, SystemExit) as error:  # noqa: BLE001 - plain Python then
                self.app.display_warning(f"triggers: not compiled ({error}); plain Python")
                return
            for path in outputs:
                build_data["force_include"][str(path)] = str(path.relative_to(out))
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

        def finalize(self, version: str, build_data: dict[str, Any], artifact: str) -> None:
            shutil.rmtree(Path(self.directory) / "native", ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
