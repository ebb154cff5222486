"""`triggers apply [FILE] [--dry-run]`: write declarations to the store, or preview the change."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from triggers.cli._app import app
from triggers.cli._backend import actor, open_stores
from triggers.cli._commands import FileArg, declarations_file
from triggers.cli._common import clock, errors, output_of
from triggers.cli._output import JsonOpt, Output, OutputOpt, emit, value_text

if TYPE_CHECKING:
    from triggers.declarations import Declarations
    from triggers.diffs import DeclarationsDiff


@app.command()
def apply(
    file: FileArg = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Print what would change; write nothing.")
    ] = False,
    note: Annotated[str | None, typer.Option(help="Why: kept in the audit log.")] = None,
    as_json: JsonOpt = False,
    output: OutputOpt = None,
) -> None:
    """Write declarations to the store: new ones are added, changed ones get a new revision,
    ones the file lacks are retired (history kept). --dry-run shows that diff first."""
    from triggers.declarations import load_declarations  # noqa: PLC0415

    shape = output_of(as_json, output)
    with errors(shape):
        path = declarations_file(file)
        declarations = load_declarations(path)  # before touching the store
        if dry_run:
            diff = _preview(declarations)
            _show(path, diff, shape, dry_run=True)
            return
        diff = _apply(declarations, note)
        _show(path, diff, shape, dry_run=False)


def _preview(declarations: Declarations) -> DeclarationsDiff:
    from triggers import actions  # noqa: PLC0415
    from triggers.diffs import diff_declarations  # noqa: PLC0415
    from triggers.errors import DatabaseMissingError  # noqa: PLC0415

    try:
        with open_stores() as stores:
            return actions.plan_apply(stores.store, declarations)
    except DatabaseMissingError:
        return diff_declarations([], declarations.triggers)  # a first apply adds them all


def _apply(declarations: Declarations, note: str | None) -> DeclarationsDiff:
    from triggers import actions  # noqa: PLC0415
    from triggers.runner.flows import registry_flows  # noqa: PLC0415

    now = clock.now()
    # The store and the flow registry alone: an apply never loads the runtime's engine,
    # nor structlog (none of this code logs; a migration's stdlib records go to stderr).
    with open_stores(create=True) as stores:
        applied = actions.apply(
            stores.store,
            stores.audit,
            registry_flows(stores.db, now=now),
            declarations,
            now=now,
            actor=actor(),
            note=note,
        )
    return applied.diff


def _show(path: Path, diff: DeclarationsDiff, shape: Output, *, dry_run: bool) -> None:
    changed = [change.trigger_id for change in diff.changed]
    if shape.machine:
        document: dict[str, Any] = {
            "file": str(path),
            "dry_run": dry_run,
            "created": diff.added,
            "updated": changed,
            "unchanged": diff.unchanged,
            "retired": diff.retired,
            "diff": diff.to_json(),
        }
        emit(document, shape)
        return
    write = sys.stdout.write
    # The summary lines `apply` always printed, each change's keys under `updated`.
    for key, ids in (("created", diff.added), ("updated", changed)):
        write(f"{key}: {len(ids)}" + (f" ({', '.join(ids)})" if ids else "") + "\n")
    for change in diff.changed:
        if change.revived:
            write(f"    {change.trigger_id}: revived (it was retired)\n")
        for field in change.fields:
            old, new = value_text(field.old), value_text(field.new)
            write(f"    {change.trigger_id}.{field.key}: {old} -> {new}\n")
    for key, ids in (("unchanged", diff.unchanged), ("retired", diff.retired)):
        write(f"{key}: {len(ids)}" + (f" ({', '.join(ids)})" if ids else "") + "\n")
    if dry_run:
        write(f"dry run: nothing written (apply {path} to do it)\n")
