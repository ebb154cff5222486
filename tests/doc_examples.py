"""The fenced examples of the docs, as the doc tests read and run them.

Conventions (docs/README.md says them for writers):

- ` ```console ` blocks are run: each `$ command` line by bash, in the document's own
  working directory, in order, and what follows it up to the next `$` is the output
  expected (stdout and stderr together). `...` in the expected text stands for any
  text (times, ids). A command that exits non-zero must be followed by `echo $?`.
  A command ending in `&` runs in the background and is stopped (SIGTERM) at the
  end of its document. ` ```console postgres ` blocks get a fresh PostgreSQL database
  in `PGDATABASE` (and `TRIGGERS_DATABASE_URL`).
- ` ```yaml ` blocks are declarations files, checked with `triggers validate`;
  ` ```yaml file=NAME ` also writes the file for the blocks after it, and
  ` ```yaml invalid ` must be refused.
- Other blocks (`sh`, `ini`, `promql`, plain) are procedures for a host and are not run.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```(\S*)\s*(.*)$")
_MARK = "\x1eCMD{}\x1e"
BACKGROUND = ".background"
"""Pids of the commands a document left running, one a line, in its working directory."""


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block of a document."""

    doc: Path
    line: int
    lang: str
    attrs: dict[str, str]
    text: str

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


@dataclass(slots=True)
class Command:
    """One `$ command` of a console block and the output the document shows for it."""

    line: int
    text: str
    expected: list[str] = field(default_factory=list)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(doc: Path) -> list[Block]:
    found: list[Block] = []
    lines = doc.read_text().splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        start = index
        index += 1
        body = []
        while index < len(lines) and lines[index] != "```":
            body.append(lines[index])
            index += 1
        attrs = dict(
            [*word.split("=", 1), ""][:2]  # `file=x.yaml` -> x.yaml; a flag -> ""
            for word in opening.group(2).split()
        )
        found.append(Block(doc, start + 1, opening.group(1), attrs, "\n".join(body) + "\n"))
        index += 1
    return found


def commands(block: Block) -> list[Command]:
    parsed: list[Command] = []
    pending: Command | None = None
    for offset, line in enumerate(block.text.splitlines()):
        if pending is not None and pending.text.endswith("\\"):
            pending.text = pending.text[:-1] + "\n" + line
            continue
        if line.startswith("$ "):
            pending = Command(block.line + 1 + offset, line[2:])
            parsed.append(pending)
        elif pending is None:
            raise AssertionError(f"{block.where}: output before the first command")
        else:
            pending.expected.append(line)
    return parsed


def matches(expected: list[str], actual: str) -> bool:
    """Whether `actual` is what the document shows, `...` standing for any text."""
    want = "\n".join(line.rstrip() for line in expected).strip("\n")
    got = "\n".join(line.rstrip() for line in actual.splitlines()).strip("\n")
    pattern = ".*?".join(re.escape(part) for part in want.split("..."))
    return re.fullmatch(pattern, got, flags=re.DOTALL) is not None


def run_console(block: Block, cwd: Path, env: dict[str, str]) -> None:
    """Run a console block; raise AssertionError naming the command that differs."""
    steps = commands(block)
    statuses = cwd / ".statuses"
    statuses.write_text("")
    script = ["exec 2>&1"]
    for number, command in enumerate(steps):
        text = command.text.rstrip()
        if text.endswith("&"):
            # Off the captured output (or the run would wait for it), until the document ends.
            text = f"( {text[:-1]} ) > /dev/null 2>&1 & echo $! >> {cwd / BACKGROUND}"
        script += [
            f"__s=$?; printf '\\n{_MARK.format(number)}\\n'; (exit $__s)",
            text,
            f'__s=$?; echo "$__s" >> {statuses}; (exit $__s)',
        ]
    done = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    outputs = re.split(r"\n?\x1eCMD\d+\x1e\n", done.stdout)[1:]
    codes = [int(code) for code in statuses.read_text().split()]
    assert len(outputs) == len(steps) == len(codes), f"{block.where}: {done.stdout}"
    for number, (command, output, code) in enumerate(zip(steps, outputs, codes, strict=True)):
        later = steps[number + 1].text.strip() if number + 1 < len(steps) else ""
        assert code == 0 or later == "echo $?", (
            f"{block.doc.relative_to(ROOT)}:{command.line}: `{command.text}` exited {code}\n"
            f"{output}"
        )
        assert matches(command.expected, output), (
            f"{block.doc.relative_to(ROOT)}:{command.line}: `{command.text}` printed\n"
            f"{output}\n--- the document shows ---\n" + "\n".join(command.expected)
        )


def stop_background(cwd: Path) -> None:
    """SIGTERM what a document left running (a daemon), and wait for it to exit."""
    pids = cwd / BACKGROUND
    if not pids.exists():
        return
    for pid in pids.read_text().split():
        # The subshell's child is the command itself: signal the whole process group
        # would reach the test run, so signal the subshell's children and the subshell.
        subprocess.run(["pkill", "-TERM", "-P", pid], check=False)
        subprocess.run(["kill", "-TERM", pid], check=False, capture_output=True)
    for pid in pids.read_text().split():
        subprocess.run(
            [
                "bash",
                "-c",
                f"for _ in $(seq 300); do kill -0 {pid} 2>/dev/null || exit 0; sleep 0.1; done",
            ],
            check=False,
        )
    pids.unlink()
