"""What applying declarations changes, and a declaration in the words of its YAML.

Pure functions over `Trigger` and `TriggerSpec`: `apply --dry-run`, `apply`, the
audit log and `describe` all describe a change with them, so a preview and the
record of the real thing read alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from triggers.clock import iso
from triggers.durations import format_duration
from triggers.model import Trigger, TriggerSpec, describe_schedule


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldChange:
    """One key of a declaration, before and after (`None`: absent)."""

    key: str
    old: Any
    new: Any

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "old": self.old, "new": self.new}


@dataclass(frozen=True, slots=True, kw_only=True)
class TriggerChange:
    """A declared trigger whose declaration differs from the stored one."""

    trigger_id: str
    fields: tuple[FieldChange, ...]
    revived: bool = False
    """It was retired and comes back."""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.trigger_id,
            "revived": self.revived,
            "fields": [change.to_json() for change in self.fields],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclarationsDiff:
    """What applying a set of declarations to the stored triggers does."""

    added: list[str] = field(default_factory=list)
    changed: list[TriggerChange] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.retired)

    def to_json(self) -> dict[str, Any]:
        return {
            "added": self.added,
            "changed": [change.to_json() for change in self.changed],
            "unchanged": self.unchanged,
            "retired": self.retired,
        }


def diff_declarations(
    stored: Sequence[Trigger], declared: Sequence[TriggerSpec]
) -> DeclarationsDiff:
    """Compare what is stored with what a file declares (the store's `apply` rules:
    a differing digest is a new revision; a stored trigger the file lacks retires)."""
    digests = {trigger.id: (trigger.spec.digest(), trigger.retired) for trigger in stored}
    return diff_digests(digests, {trigger.id: trigger for trigger in stored}, declared)


def changed_ids(
    digests: Mapping[str, tuple[str, bool]], declared: Sequence[TriggerSpec]
) -> list[str]:
    """The declared triggers that are stored under another declaration, or retired: the
    only ones whose stored declaration a diff needs to read."""
    return [
        spec.id
        for spec in declared
        if spec.id in digests and digests[spec.id] != (spec.digest(), False)
    ]


def diff_digests(
    digests: Mapping[str, tuple[str, bool]],
    changed: Mapping[str, Trigger],
    declared: Sequence[TriggerSpec],
) -> DeclarationsDiff:
    """`diff_declarations` from every stored trigger's digest and retirement, and the
    stored triggers of `changed_ids` alone: an apply of ten thousand triggers of which
    one changed decodes one stored declaration, not ten thousand."""
    diff = DeclarationsDiff()
    for spec in declared:
        found = digests.get(spec.id)
        before = changed.get(spec.id)
        if found is None:
            diff.added.append(spec.id)
        elif found == (spec.digest(), False):
            diff.unchanged.append(spec.id)
        elif before is not None:
            fields = field_changes(declaration_view(before.spec), declaration_view(spec))
            diff.changed.append(
                TriggerChange(trigger_id=spec.id, fields=tuple(fields), revived=before.retired)
            )
        else:  # stored, but unreadable or removed meanwhile: a change of unknown fields
            diff.changed.append(TriggerChange(trigger_id=spec.id, fields=(), revived=found[1]))
    declared_ids = {spec.id for spec in declared}
    diff.retired.extend(
        trigger_id
        for trigger_id, (_, retired) in sorted(digests.items())
        if trigger_id not in declared_ids and not retired
    )
    return diff


def declaration_view(spec: TriggerSpec) -> dict[str, Any]:
    """A declaration with YAML's keys and forms (`every 90s`, `window: 6h`, ISO instants)."""

    def when(value: Any) -> str | None:
        return None if value is None else iso(value)

    return {
        "flow": spec.flow,
        "flow_version": spec.flow_version,
        "schedule": describe_schedule(spec.schedule),
        "timezone": spec.timezone,
        "overlap": spec.overlap.value,
        "max_active": spec.max_active,
        "max_buffer": spec.max_buffer,
        "catchup": {
            "policy": spec.catchup.policy.value,
            "window": format_duration(spec.catchup.window),
            "grace": format_duration(spec.catchup.grace),
        },
        "jitter": format_duration(spec.jitter),
        "input": spec.input,
        "enabled": spec.enabled,
        "description": spec.description,
        "start": when(spec.start_at),
        "end": when(spec.end_at),
        "max_runs": spec.max_runs,
        "pause_on_failure": spec.pause_on_failure,
        **_calendars_view(spec),
        # Only when given, as calendars: a revision that moved a trigger to another pool,
        # or resized its pool, reads `pool: a -> b` or `pool_slots: 2 -> 3`.
        **({"pool": spec.pool.name, "pool_slots": spec.pool.slots} if spec.pool else {}),
        # Only when given: a revision that changed it reads `requires: a completed within
        # 6h -> a completed within 2h`.
        **({"requires": spec.requires.describe()} if spec.requires else {}),
        **_alert_view(spec),
    }


def _alert_view(spec: TriggerSpec) -> dict[str, Any]:
    """`alert` as the file says it (channels by name), for a trigger with a rule."""
    rule = spec.alert
    if rule is None:
        return {}

    def span(value: Any) -> str | None:
        return None if value is None else format_duration(value)

    return {
        "alert": {
            "to": [channel.name for channel in rule.to],
            "on": sorted(event.value for event in rule.on),
            "late": span(rule.late),
            "stuck": span(rule.stuck),
            "repeat": span(rule.repeat),
        }
    }


def _calendars_view(spec: TriggerSpec) -> dict[str, Any]:
    """`exclude`, `only` and the rules of the calendars they name (so that a revision
    that changed a calendar says what changed), for a trigger that names any."""
    if not spec.calendars:
        return {}
    rules = {}
    for calendar in spec.calendars:
        given = calendar.to_json()
        rules[calendar.name] = {k: v for k, v in given.items() if k != "name" and v}
    return {
        "exclude": [calendar.name for calendar in spec.exclude],
        "only": [calendar.name for calendar in spec.only],
        "calendars": rules,
    }


def field_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldChange]:
    """The keys whose values differ, nested mappings flattened (`catchup.window`)."""
    flat_old, flat_new = _flatten(old), _flatten(new)
    return [
        FieldChange(key=key, old=flat_old.get(key), new=flat_new.get(key))
        for key in sorted(flat_old.keys() | flat_new.keys())
        if flat_old.get(key) != flat_new.get(key)
    ]


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping) and item:
            flat.update(_flatten(item, f"{name}."))
        else:
            flat[name] = item
    return flat
