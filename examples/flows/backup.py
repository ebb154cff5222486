"""A durable Python flow with branches: dump several databases at once, then upload.

Declared in `examples/python-flow.yaml` as `python: examples.flows.backup:build`.
Each dump is a branch of one `ctx.parallel` call: they run at the same time (at
most `max_parallel` of them), and the upload starts once all of them finished. If
the daemon stops in the middle, the next start keeps the dumps that completed,
re-runs a dump that was in flight (they are declared idempotent: a dump rewrites its
own file), and then uploads.

The dump here writes a small file so that the example runs anywhere; a real one
would run `pg_dump` (as a command step of a steps flow, or through `subprocess`).
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

from looms_runtime import StepContext
from looms_runtime.flow import FlowContext, Retry


def dump(database: str, out_dir: str, context: StepContext) -> str:
    """Write the database's dump; stops early when the run (or a sibling) asks it to."""
    if context.cancel_requested:
        raise RuntimeError("stopped before the dump started")
    path = Path(out_dir) / f"{database}.dump"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"-- dump of {database} ({context.idempotency_key})\n")
    return str(path)


def upload(dumps: list[str], out_dir: str) -> str:
    """Write the manifest a real upload would send along: each dump with its sha256."""
    lines = [f"{Path(p).name} {hashlib.sha256(Path(p).read_bytes()).hexdigest()}" for p in dumps]
    manifest = Path(out_dir) / "manifest.txt"
    manifest.write_text("\n".join(lines) + "\n")
    return str(manifest)


def build(ctx: FlowContext, data: dict[str, Any] | None) -> dict[str, Any]:
    """The flow: input `{databases, out_dir, max_parallel}` (all optional)."""
    data = data or {}
    out_dir = data.get("out_dir", "/tmp/triggers-backup")  # noqa: S108 - runs anywhere
    retry = Retry(max_attempts=3, backoff=timedelta(seconds=5))
    dumps = ctx.parallel(
        *(
            ctx.branch(f"dump-{name}", dump, name, out_dir, idempotent=True, retry=retry)
            for name in data.get("databases", ["app", "auth", "billing"])
        ),
        max_parallel=data.get("max_parallel", 3),
    )
    manifest = ctx.step("upload", upload, dumps, out_dir, idempotent=True)
    return {"dumps": dumps, "manifest": manifest}
