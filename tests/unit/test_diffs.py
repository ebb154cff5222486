"""What applying a file changes, in the words of the YAML (`apply --dry-run`, the audit log)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.factories import spec
from triggers.diffs import (
    FieldChange,
    changed_ids,
    declaration_view,
    diff_declarations,
    diff_digests,
)
from triggers.model import Overlap, Trigger, TriggerSpec

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def stored(declared: TriggerSpec, *, retired: bool = False) -> Trigger:
    return Trigger(
        spec=declared, revision=1, retired=retired, watermark_at=T0, created_at=T0, updated_at=T0
    )


def test_added_changed_unchanged_and_retired_triggers_are_told_apart() -> None:
    before = [
        stored(spec("same")),
        stored(spec("edited", cron="0 * * * *")),
        stored(spec("dropped")),
        stored(spec("back"), retired=True),
        stored(spec("gone-long-ago"), retired=True),
    ]
    after = [spec("same"), spec("edited", cron="30 * * * *"), spec("back"), spec("new")]

    diff = diff_declarations(before, after)

    assert diff.added == ["new"]
    assert [c.trigger_id for c in diff.changed] == ["edited", "back"]
    assert diff.unchanged == ["same"]
    assert diff.retired == ["dropped"]  # an already retired trigger is not retired again
    assert diff.changed[0].fields == (
        FieldChange(key="schedule", old="cron 0 * * * *", new="cron 30 * * * *"),
    )
    assert diff.changed[1].revived and diff.changed[1].fields == ()
    assert not diff.empty


def test_field_changes_name_nested_keys_in_yaml_forms() -> None:
    old = spec("j", overlap=Overlap.SKIP, window=timedelta(hours=1), input={"full": True})
    new = spec("j", overlap=Overlap.BUFFER, window=timedelta(hours=6), input={"full": False})

    [change] = diff_declarations([stored(old)], [new]).changed

    assert {(f.key, f.old, f.new) for f in change.fields} == {
        ("overlap", "skip", "buffer"),
        ("catchup.window", "1h", "6h"),
        ("input.full", True, False),
    }
    assert change.to_json()["fields"][0] == {"key": "catchup.window", "old": "1h", "new": "6h"}


def test_a_declaration_reads_as_its_yaml() -> None:
    view = declaration_view(spec("v", every=timedelta(seconds=90), jitter=timedelta(minutes=2)))

    assert view["schedule"] == "every 1m30s"
    assert view["jitter"] == "2m"
    assert view["catchup"] == {"policy": "latest", "window": "1d", "grace": "1m"}
    assert view["start"] is None


def test_nothing_to_apply_is_an_empty_diff() -> None:
    diff = diff_declarations([stored(spec("a"))], [spec("a")])

    assert diff.empty
    assert diff.to_json() == {"added": [], "changed": [], "unchanged": ["a"], "retired": []}


def test_a_diff_from_digests_reads_only_the_changed_declarations() -> None:
    before = [
        stored(spec("same")),
        stored(spec("edited", cron="0 * * * *")),
        stored(spec("dropped")),
        stored(spec("back"), retired=True),
    ]
    after = [spec("same"), spec("edited", cron="30 * * * *"), spec("back"), spec("new")]
    digests = {t.id: (t.spec.digest(), t.retired) for t in before}

    wanted = changed_ids(digests, after)
    diff = diff_digests(digests, {t.id: t for t in before if t.id in wanted}, after)

    assert wanted == ["edited", "back"]
    assert diff == diff_declarations(before, after)
