"""`triggers alerts list|test`: what was sent, to whom, and whether a channel answers."""

from __future__ import annotations

from typing import Annotated

import typer

from triggers.cli._app import alerts_app
from triggers.cli._common import JsonOpt, clock, emit, errors, table
from triggers.errors import InputError

_STATUSES = ("pending", "delivered", "failed")


@alerts_app.command("list")
def list_command(
    trigger: Annotated[
        str | None, typer.Option("--trigger", metavar="ID", help="Only this trigger's alerts.")
    ] = None,
    status: Annotated[
        str | None,
        typer.Option("--status", metavar="S", help="pending, delivered or failed."),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=100_000, help="At most this many.")
    ] = 100,
    as_json: JsonOpt = False,
) -> None:
    """The alerts raised, newest first: event, channel, delivered or not, and why."""
    from triggers.cli._backend import open_reads  # noqa: PLC0415
    from triggers.store.sql_alerts import SqlAlertOutbox  # noqa: PLC0415

    with errors(as_json):
        if status is not None and status not in _STATUSES:
            raise InputError(
                f"unknown status {status!r}: one of {', '.join(_STATUSES)}", status=status
            )
        with open_reads() as reads:
            found = SqlAlertOutbox(reads.db).list(trigger_id=trigger, status=status, limit=limit)
    documents = [record.to_json() for record in found]
    if as_json:
        emit(documents)
        return
    table(
        ["created", "event", "trigger", "occurrence", "channel", "status", "tries", "answer"],
        [
            [
                d["created_at"],
                d["event"],
                d["trigger_id"],
                d["occurrence"],
                d["channel"],
                d["status"],
                d["attempts"],
                d["response"] if d["status"] == "delivered" else d["last_error"],
            ]
            for d in documents
        ],
    )


@alerts_app.command("test")
def send_test_command(
    channel: Annotated[str, typer.Argument(metavar="CHANNEL", help="A channel of the file.")],
    as_json: JsonOpt = False,
) -> None:
    """Send a test alert to CHANNEL (of --config / TRIGGERS_CONFIG) and show its answer.

    Exit 1 when the channel does not accept it.
    """
    from triggers.alert_rules import AlertEvent, AlertFacts, alert_payload  # noqa: PLC0415
    from triggers.cli._backend import settings  # noqa: PLC0415
    from triggers.cli._commands import declarations_file  # noqa: PLC0415
    from triggers.declarations import load_declarations  # noqa: PLC0415
    from triggers.delivery import SmtpServer, deliver  # noqa: PLC0415

    with errors(as_json):
        declarations = load_declarations(declarations_file(None))
        found = declarations.channels.get(channel)
        if found is None:
            names = ", ".join(declarations.channels) or "none"
            raise InputError(f"no channel {channel!r} in the file (declared: {names})")
        smtp = SmtpServer.of(settings())
        now = clock.now()
        facts = AlertFacts(event=AlertEvent.TEST, trigger_id="test", occurrence_at=now, at=now)
        answer = deliver(found.to_json(), alert_payload(facts), smtp=smtp)
    document = {
        "channel": channel,
        "kind": found.kind,
        "delivered": answer.delivered,
        "answer": answer.detail,
    }
    if as_json:
        emit(document)
    else:
        verdict = "delivered" if answer.delivered else "NOT delivered"
        typer.echo(f"{channel} ({found.kind}): {verdict}: {answer.detail}")
    if not answer.delivered:
        raise typer.Exit(1)
