"""Spec building: valid mappings become `FlowSpec`s and `TriggerSpec`s.

The rules that relate several keys live here (one schedule per trigger, a flow
reference that exists, defaults merged key by key, a step that does one thing);
the shape of each mapping is checked by its model first (`_models.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from triggers.alert_rules import CHANNEL_KINDS, DEFAULT_EVENTS, AlertChannel, AlertEvent, AlertRule
from triggers.clock import iso
from triggers.declarations._dependencies import check_dependencies
from triggers.declarations._messages import describe, suggestion
from triggers.declarations._models import (
    AlertRuleModel,
    CatchupModel,
    ChannelModel,
    DefaultsModel,
    DocumentModel,
    FlowModel,
    HolidaysModel,
    NamedCalendarModel,
    PoolModel,
    RetryModel,
    StepModel,
    TriggerFieldsModel,
    TriggerModel,
)
from triggers.declarations._needs import check_needs
from triggers.declarations._problems import Problems, validate_partial
from triggers.declarations._values import check_id
from triggers.declarations._yaml import Loc
from triggers.errors import ScheduleError
from triggers.model import (
    WEEKDAYS,
    AfterSchedule,
    AtSchedule,
    CalendarSchedule,
    CalendarSpec,
    Catchup,
    CronSchedule,
    EverySchedule,
    FlowSpec,
    HolidayRule,
    Join,
    JsonValue,
    PoolSpec,
    Requirement,
    Schedule,
    TriggerSpec,
    Upstream,
)
from triggers.scheduler.calendars import check_calendar, compile_calendars
from triggers.scheduler.occurrences import compile_schedule

SUPPORTED_VERSION = 1
SCHEDULE_KINDS = ("cron", "every", "calendar", "at", "after")
# Step kind: how messages name it, and which optional step keys it takes.
STEP_KINDS = {
    "run": (
        "a command",
        frozenset({"timeout", "retry", "env", "env_inherit", "secrets", "cwd", "idempotent"}),
    ),
    "http": ("an http", frozenset({"timeout", "retry", "idempotent"})),
    "python": ("a python", frozenset({"timeout", "retry", "idempotent"})),
    "sleep": ("a sleep", frozenset[str]()),
    "wait_signal": ("a wait_signal", frozenset[str]()),
}
_STEP_OPTIONS = ("timeout", "retry", "env", "env_inherit", "secrets", "cwd", "idempotent")
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_DEFAULT_ZONE = "UTC"
# Keys that TriggerSpec holds under the same name and meaning, copied after merging.
_COPIED_KEYS = sorted(
    TriggerFieldsModel.model_fields.keys()
    - {"input", "catchup", "start", "end", "exclude", "only", "alert", "pool"}
)
_CALENDAR_RULES = ("holidays", "dates", "yearly", "weekdays", "cron")
# A problem in any of these makes compiling the schedule pointless or misleading.
_SCHEDULE_INPUTS = frozenset({"id", "timezone", "start", "end", *SCHEDULE_KINDS})


@dataclass(frozen=True, slots=True, kw_only=True)
class _Context:
    problems: Problems
    defaults: DefaultsModel | None
    bad_defaults: frozenset[str]
    flows: dict[str, FlowSpec]
    flow_names: list[str] | None  # None: `flows` itself is invalid, references go unchecked
    channels: dict[str, AlertChannel] | None  # None: `alerts.channels` is invalid
    calendars: dict[str, CalendarSpec]
    calendar_names: list[str] | None  # None: `calendars` itself is invalid
    pools: dict[str, PoolSpec]
    pool_names: list[str] | None  # None: `pools` itself is invalid
    flow_pools: dict[str, str]
    """The `pool` each flow names, by flow (not part of its definition: the runtime
    never sees it, and it does not version the flow)."""


def build_specs(
    data: object, problems: Problems
) -> tuple[dict[str, FlowSpec], list[TriggerSpec], dict[str, AlertChannel]]:
    """The valid flows by name, the valid triggers in file order and the valid alert
    channels by name; problems go to `problems`.

    Returns what is valid even when something is not: callers raise first when any
    problem was reported.
    """
    if data is None:
        if not problems.count:
            problems.add((), "the file is empty; it starts with 'version: 1'")
        return {}, [], {}
    document, bad = validate_partial(DocumentModel, data, (), problems)
    if document is None or not isinstance(data, dict):
        return {}, [], {}
    if "version" not in data:
        problems.add(("version",), "missing required key 'version' (this format is 'version: 1')")
    elif isinstance(data["version"], bool) or data["version"] != SUPPORTED_VERSION:
        message = f"unsupported version {describe(data['version'])}; this release reads version 1"
        problems.add(("version",), message)
    defaults, bad_defaults = None, frozenset[str]()
    if document.defaults is not None:
        defaults, bad_defaults = validate_partial(
            DefaultsModel, document.defaults, ("defaults",), problems
        )
    raw_flows = document.flows or {}
    channels: dict[str, AlertChannel] | None = _channels(
        document.alerts.channels if document.alerts else None, problems
    )
    if "alerts" in bad:
        channels = None
    if defaults is not None and defaults.alert is not None and channels is not None:
        _check_channels(defaults.alert, ("defaults", "alert"), channels, problems)
    raw_calendars = document.calendars or {}
    raw_pools = document.pools or {}
    context = _Context(
        problems=problems,
        defaults=defaults,
        bad_defaults=bad_defaults,
        flows=_flows(raw_flows, problems),
        flow_names=None if "flows" in bad else [str(name) for name in raw_flows],
        channels=channels,
        calendars=_calendars(raw_calendars, problems),
        calendar_names=None if "calendars" in bad else [str(name) for name in raw_calendars],
        pools=_pools(raw_pools, problems),
        pool_names=None if "pools" in bad else [str(name) for name in raw_pools],
        flow_pools={
            name: raw["pool"]
            for name, raw in raw_flows.items()
            if isinstance(name, str) and isinstance(raw, dict) and isinstance(raw.get("pool"), str)
        },
    )
    for name, pool in context.flow_pools.items():
        _pool_named(pool, ("flows", name, "pool"), context)
    raw_triggers = document.triggers or []
    triggers = [
        _trigger(raw, ("triggers", index), context) for index, raw in enumerate(raw_triggers)
    ]
    report_duplicate_ids(raw_triggers, ("triggers",), problems, what="trigger id")
    check_dependencies(raw_triggers, problems)
    valid = [trigger for trigger in triggers if trigger is not None]
    return context.flows, valid, channels or {}


def _flows(raw_flows: dict[Any, Any], problems: Problems) -> dict[str, FlowSpec]:
    flows = {}
    for name, raw in raw_flows.items():
        loc: Loc = ("flows", name)
        if not isinstance(name, str):
            problems.add(loc, f"a flow name must be a string, got {describe(name)}", at="key")
            continue
        try:
            check_id(name, what="flow name")
        except ValueError as exc:
            problems.add(loc, str(exc), at="key")
        definition = _flow_definition(raw, loc, problems)
        if definition is not None:
            version = FlowSpec.digest(definition)
            flows[name] = FlowSpec(name=name, definition=definition, version=version)
    return flows


def _calendars(raw_calendars: dict[Any, Any], problems: Problems) -> dict[str, CalendarSpec]:
    calendars = {}
    for name, raw in raw_calendars.items():
        loc: Loc = ("calendars", name)
        if not isinstance(name, str):
            problems.add(loc, f"a calendar name must be a string, got {describe(name)}", at="key")
            continue
        before = problems.count
        try:
            check_id(name, what="calendar name")
        except ValueError as exc:
            problems.add(loc, str(exc), at="key")
        model, _ = validate_partial(NamedCalendarModel, raw, loc, problems)
        if model is None or not isinstance(raw, dict):
            continue
        if not any(key in raw for key in _CALENDAR_RULES):
            message = f"a calendar needs at least one of: {', '.join(_CALENDAR_RULES)}"
            problems.add(loc, message, at="key")
        if problems.count > before:
            continue
        calendar = _calendar_spec(name, model)
        for where, message in check_calendar(calendar):
            problems.add((*loc, *where), message)
        if problems.count == before:
            calendars[name] = calendar
    return calendars


def _pools(raw_pools: dict[Any, Any], problems: Problems) -> dict[str, PoolSpec]:
    pools = {}
    for name, raw in raw_pools.items():
        loc: Loc = ("pools", name)
        if not isinstance(name, str):
            problems.add(loc, f"a pool name must be a string, got {describe(name)}", at="key")
            continue
        before = problems.count
        try:
            check_id(name, what="pool name")
        except ValueError as exc:
            problems.add(loc, str(exc), at="key")
        model, _ = validate_partial(PoolModel, raw, loc, problems)
        if model is None or not isinstance(raw, dict):
            continue
        if problems.count == before:
            pools[name] = PoolSpec(name=name, slots=model.slots)
    return pools


def _trigger_pool(trigger: TriggerModel, loc: Loc, context: _Context) -> PoolSpec | None:
    """The trigger's `pool`: its own, else its flow's, else the defaults'; or None."""
    defaults = context.defaults
    if "pool" in trigger.model_fields_set:
        return _pool_named(trigger.pool, (*loc, "pool"), context)
    if trigger.flow in context.flow_pools:
        # Reported at the flow, once, when unknown.
        return context.pools.get(context.flow_pools[trigger.flow])
    if defaults is not None and "pool" in defaults.model_fields_set:
        return _pool_named(defaults.pool, ("defaults", "pool"), context)
    return None


def _pool_named(name: str | None, where: Loc, context: _Context) -> PoolSpec | None:
    """The pool `name` (None: none), reporting an unknown one at `where`."""
    if name is None:
        return None
    pool = context.pools.get(name)
    known = context.pool_names
    if pool is None and known is not None and name not in known:
        hint = (
            suggestion(name, known) or f" (declared: {', '.join(known)})"
            if known
            else ": this file declares no pools"
        )
        context.problems.add(where, f"unknown pool '{name}'{hint}")
    return pool


def _calendar_spec(name: str, model: NamedCalendarModel) -> CalendarSpec:
    holidays: HolidaysModel | None = model.holidays
    rule = None
    if holidays is not None:
        rule = HolidayRule(
            country=holidays.country,
            subdiv=holidays.subdiv,
            language=holidays.language,
            categories=tuple(sorted(set(holidays.categories or ()))),
        )
    return CalendarSpec(
        name=name,
        holidays=rule,
        dates=tuple(sorted(set(model.dates or ()))),
        yearly=tuple(sorted(set(model.yearly or ()))),
        weekdays=tuple(sorted(set(model.weekdays or ()))),
        cron=tuple(" ".join(expression.split()) for expression in model.cron or ()),
        timezone=model.timezone,
    )


def _trigger_calendars(
    trigger: TriggerModel, loc: Loc, context: _Context
) -> dict[str, tuple[CalendarSpec, ...]]:
    """The trigger's `exclude` and `only` calendars (its own, else the defaults')."""
    found: dict[str, tuple[CalendarSpec, ...]] = {}
    defaults = context.defaults
    for key in ("exclude", "only"):
        if key in trigger.model_fields_set:
            names, where = getattr(trigger, key) or [], (*loc, key)
        elif defaults is not None and key in defaults.model_fields_set:
            names, where = getattr(defaults, key) or [], ("defaults", key)
        else:
            continue
        specs = []
        for index, name in enumerate(dict.fromkeys(names)):
            calendar = context.calendars.get(name)
            if calendar is not None:
                specs.append(calendar)
                continue
            known = context.calendar_names
            if known is None or name in known:
                continue  # the calendar itself is invalid, and reported already
            hint = (
                suggestion(name, known) or f" (declared: {', '.join(known)})"
                if known
                else ": this file declares no calendars"
            )
            context.problems.add((*where, index), f"unknown calendar '{name}'{hint}")
        found[key] = tuple(specs)
    both = {c.name for c in found.get("exclude", ())} & {c.name for c in found.get("only", ())}
    if both:
        context.problems.add(
            (*loc, "only"),
            f"calendar {', '.join(sorted(both))} is both excluded and the only one: "
            "the trigger would never fire",
            at="key",
        )
    for calendar in found.get("exclude", ()):
        if len(calendar.weekdays) == len(WEEKDAYS):
            context.problems.add(
                (*loc, "exclude"),
                f"calendar '{calendar.name}' holds every weekday: the trigger would never fire",
                at="key",
            )
    return found


def _check_one_shot(
    schedule: Schedule, fields: dict[str, Any], loc: Loc, problems: Problems
) -> None:
    """An `at` trigger whose one occurrence a calendar leaves out would never fire."""
    if not isinstance(schedule, AtSchedule) or not (fields.get("exclude") or fields.get("only")):
        return
    probe = TriggerSpec(
        id="probe",
        flow="probe",
        flow_version="",
        schedule=schedule,
        timezone=fields["timezone"],
        exclude=fields.get("exclude", ()),
        only=fields.get("only", ()),
    )
    calendars = compile_calendars(probe)
    excluded = None if calendars is None else calendars.exclusion(schedule.at)
    if excluded is not None:
        message = f"its one occurrence is left out by calendar {excluded}: it would never fire"
        problems.add((*loc, "at"), message)


def _trigger(raw: object, loc: Loc, context: _Context) -> TriggerSpec | None:
    problems = context.problems
    before = problems.count
    trigger, bad = validate_partial(TriggerModel, raw, loc, problems)
    if trigger is None or not isinstance(raw, dict):
        return None
    for key in ("id", "flow"):
        if key not in raw:
            problems.add((*loc, key), f"missing required key '{key}'")
    _check_flow_reference(trigger.flow, (*loc, "flow"), context)
    fields = _merged_fields(trigger, loc, context.defaults, problems)
    fields.update(_trigger_calendars(trigger, loc, context))
    fields["pool"] = _trigger_pool(trigger, loc, context)
    if trigger.requires is not None:
        required = trigger.requires
        fields["requires"] = Requirement(
            trigger=required.trigger, outcome=required.outcome, since=required.since
        )
    zone, start_at, end_at = fields["timezone"], fields["start_at"], fields["end_at"]
    schedule = _schedule(raw, trigger, loc, zone, problems)
    bounds_ok = start_at is None or end_at is None or end_at > start_at
    bad_defaults = {key for key in context.bad_defaults if key not in raw}
    bad_inputs = (bad | bad_defaults) & _SCHEDULE_INPUTS
    if bad_inputs == {"timezone"}:
        zone = "UTC"  # reported already: the schedule is still checked, in UTC
    if schedule is not None and trigger.id is not None and bounds_ok and bad_inputs <= {"timezone"}:
        try:
            compile_schedule(
                schedule, trigger_id=trigger.id, timezone=zone, start_at=start_at, end_at=end_at
            )
        except ScheduleError as exc:
            problems.add((*loc, schedule.kind), exc.message)
        else:
            _check_one_shot(schedule, fields, loc, problems)
    flow = context.flows.get(trigger.flow or "")
    alert = _alert_rule(trigger, loc, context)
    if problems.count > before or trigger.id is None or flow is None or schedule is None:
        return None
    return TriggerSpec(
        id=trigger.id,
        flow=flow.name,
        flow_version=flow.version,
        schedule=schedule,
        alert=alert,
        **fields,
    )


def _merged_fields(
    trigger: TriggerModel, loc: Loc, defaults: DefaultsModel | None, problems: Problems
) -> dict[str, Any]:
    """TriggerSpec's keyword arguments other than id, flow and schedule."""

    def pick(name: str) -> tuple[Any, Loc] | None:  # the value and where it was given
        if name in trigger.model_fields_set:
            return getattr(trigger, name), (*loc, name)
        if defaults is not None and name in defaults.model_fields_set:
            return getattr(defaults, name), ("defaults", name)
        return None

    fields: dict[str, Any] = {"timezone": _DEFAULT_ZONE}
    fields.update({name: picked[0] for name in _COPIED_KEYS if (picked := pick(name))})
    if (picked := pick("input")) is not None:
        fields["input"] = to_json(picked[0], picked[1], problems)
    fields["catchup"] = _catchup(trigger.catchup, defaults.catchup if defaults else None)
    zone, start, end = fields["timezone"], pick("start"), pick("end")
    start_at = fields["start_at"] = _utc(start[0], zone) if start and start[0] is not None else None
    end_at = fields["end_at"] = _utc(end[0], zone) if end and end[0] is not None else None
    if end is not None and start_at is not None and end_at is not None and end_at <= start_at:
        problems.add(end[1], f"end ({iso(end_at)}) is not after start ({iso(start_at)})")
    return fields


def _check_flow_reference(name: str | None, loc: Loc, context: _Context) -> None:
    names = context.flow_names
    if name is None or names is None or name in names:
        return
    if not names:
        context.problems.add(loc, f"unknown flow '{name}': this file declares no flows")
        return
    hint = suggestion(name, names) or f" (declared: {', '.join(names)})"
    context.problems.add(loc, f"unknown flow '{name}'{hint}")


def _schedule(
    raw: dict[Any, Any], trigger: TriggerModel, loc: Loc, zone: str, problems: Problems
) -> Schedule | None:
    kinds = [kind for kind in SCHEDULE_KINDS if kind in raw]
    if not kinds:
        message = (
            "no schedule: give one of cron, every, calendar, at (or after: for a dependent trigger)"
        )
        problems.add(loc, message, at="key")
        return None
    if len(kinds) > 1 and "after" in kinds:
        others = ", ".join(kind for kind in kinds if kind != "after")
        message = f"after replaces a schedule: give either {others} or after, not both"
        problems.add((*loc, "after"), message, at="key")
        return None
    if len(kinds) > 1:
        message = f"several schedules ({', '.join(kinds)}): give exactly one"
        problems.add((*loc, kinds[1]), message, at="key")
        return None
    if trigger.cron is not None:
        return CronSchedule(expression=" ".join(trigger.cron.split()))
    if trigger.every is not None:
        every = trigger.every
        start = None if every.start is None else _utc(every.start, zone)
        return EverySchedule(interval=every.interval, start=start)
    if trigger.calendar is not None:
        calendar = trigger.calendar
        start = None if calendar.start is None else _utc(calendar.start, zone)
        return CalendarSchedule(**calendar.model_dump(exclude={"start"}), start=start)
    if trigger.at is not None:
        return AtSchedule(at=_utc(trigger.at, zone))
    if trigger.after is not None:
        after = trigger.after
        upstreams = tuple(
            Upstream(trigger=upstream.trigger, outcome=upstream.outcome)
            for upstream in after.upstreams()
        )
        join: Join = "all" if after.all_of is not None else "any" if after.any_of else "one"
        return AfterSchedule(upstreams=upstreams, join=join, within=after.within)
    return None  # the schedule's value was invalid and is reported already


# ---- alerts -------------------------------------------------------------------------


def _channels(raw: dict[Any, Any] | None, problems: Problems) -> dict[str, AlertChannel]:
    """The valid channels of `alerts.channels` by name; problems go to `problems`."""
    found: dict[str, AlertChannel] = {}
    for name, value in (raw or {}).items():
        loc: Loc = ("alerts", "channels", name)
        if not isinstance(name, str):
            problems.add(loc, f"a channel name must be a string, got {describe(name)}", at="key")
            continue
        try:
            check_id(name, what="channel name")
        except ValueError as exc:
            problems.add(loc, str(exc), at="key")
            continue
        channel, _ = validate_partial(ChannelModel, value, loc, problems)
        if channel is None or not isinstance(value, dict):
            continue
        kinds = [kind for kind in CHANNEL_KINDS if kind in value]
        if len(kinds) != 1:
            message = (
                f"a channel needs one of: {', '.join(CHANNEL_KINDS)}"
                if not kinds
                else f"a channel sends one way; this one has {' and '.join(kinds)}"
            )
            problems.add((*loc, kinds[1]) if kinds else loc, message, at="key")
            continue
        config: dict[str, JsonValue] = {}
        if channel.webhook is not None:
            config = {"url": channel.webhook.url, "headers_file": channel.webhook.headers_file}
        elif channel.email is not None:
            config = {"to": channel.email.to, "subject_prefix": channel.email.subject_prefix}
        elif channel.command is not None:
            config = {"argv": channel.command}
        else:
            continue  # the kind's value was invalid and is reported already
        config["timeout_s"] = _seconds(channel.timeout)
        found[name] = AlertChannel(name=name, kind=kinds[0], config=config)
    return found


def _check_channels(
    rule: AlertRuleModel, loc: Loc, channels: dict[str, AlertChannel], problems: Problems
) -> bool:
    """Report each name of `rule.to` that is not a declared channel; True when all are."""
    ok = True
    for index, name in enumerate(rule.to or []):
        if name in channels:
            continue
        ok = False
        if not channels:
            message = f"unknown channel '{name}': this file declares no alerts.channels"
        else:
            hint = suggestion(name, channels) or f" (declared: {', '.join(channels)})"
            message = f"unknown channel '{name}'{hint}"
        problems.add((*loc, "to", index), message)
    return ok


def _alert_rule(trigger: TriggerModel, loc: Loc, context: _Context) -> AlertRule | None:
    """The trigger's `alert`, merged key by key over `defaults.alert`; None: no alerts."""
    layers = [context.defaults.alert if context.defaults else None, trigger.alert]
    if all(layer is None for layer in layers) or context.channels is None:
        return None
    if trigger.alert is not None and not _check_channels(
        trigger.alert, (*loc, "alert"), context.channels, context.problems
    ):
        return None
    values: dict[str, Any] = {}
    for layer in layers:
        if layer is not None:
            values.update({name: getattr(layer, name) for name in layer.model_fields_set})
    if "to" not in values:
        where = (*loc, "alert") if trigger.alert is not None else ("defaults", "alert")
        context.problems.add(where, "an alert needs 'to': the channels it is sent to", at="key")
        return None
    names = list(dict.fromkeys(values["to"]))
    if not names or any(name not in context.channels for name in names):
        return None  # `to: []` switches alerts off; unknown names are reported already
    on = values.get("on")
    return AlertRule(
        to=tuple(context.channels[name] for name in names),
        on=DEFAULT_EVENTS if on is None else frozenset(AlertEvent(name) for name in on),
        late=values.get("late"),
        stuck=values.get("stuck"),
        repeat=values.get("repeat"),
    )


def _catchup(*layers: CatchupModel | None) -> Catchup:
    # Most specific layer first; each key falls back on its own.
    values: dict[str, Any] = {}
    for layer in reversed(layers):
        if layer is not None:
            values.update({name: getattr(layer, name) for name in layer.model_fields_set})
    return Catchup(**values)


def _utc(value: datetime, zone: str) -> datetime:
    if value.tzinfo is None:  # a wall time in the trigger's zone
        value = value.replace(tzinfo=ZoneInfo(zone))
    return value.astimezone(UTC)


# ---- flows --------------------------------------------------------------------------


def _flow_definition(raw: object, loc: Loc, problems: Problems) -> dict[str, JsonValue] | None:
    """The canonical JSON definition of one flow, or None once its problems are reported.

    The durable runtime interprets this JSON and its digest versions the flow, so its
    keys are a contract (docs/yaml.md, "Flows" and "Steps") and it keeps no trace of the
    YAML's formatting.
    """
    before = problems.count
    flow, _ = validate_partial(FlowModel, raw, loc, problems)
    if flow is None or not isinstance(raw, dict):
        return None
    kinds = [key for key in ("steps", "python") if key in raw]
    if not kinds:
        message = "a flow needs 'steps' (a list) or 'python' (a 'module:function' reference)"
        problems.add(loc, message, at="key")
    elif len(kinds) > 1:
        problems.add((*loc, "python"), "a flow has either 'steps' or 'python', not both", at="key")
    elif flow.python is not None:
        if flow.version is None:
            return {"kind": "python", "ref": flow.python}
        return {"kind": "python", "ref": flow.python, "version": flow.version}
    if flow.version is not None:
        problems.add(
            (*loc, "version"),
            "'version' labels a python flow; a steps flow is versioned by its steps",
            at="key",
        )
    if flow.steps is None or problems.count > before:
        return None
    steps = [_step(item, (*loc, "steps", index), problems) for index, item in enumerate(flow.steps)]
    report_duplicate_ids(flow.steps, (*loc, "steps"), problems, what="step id")
    if problems.count == before:
        check_needs(steps, (*loc, "steps"), problems)
    if problems.count > before:
        return None
    definition: dict[str, JsonValue] = {"kind": "steps", "steps": steps}
    # Only when given, so that the digest (the version) of existing flows is unchanged.
    if flow.max_parallel is not None:
        definition["max_parallel"] = flow.max_parallel
    if flow.fail_fast is not None:
        definition["fail_fast"] = flow.fail_fast
    if ("max_parallel" in raw or "fail_fast" in raw) and not any(
        isinstance(step, dict) and "needs" in step for step in steps
    ):
        problems.add(
            (*loc, "max_parallel" if "max_parallel" in raw else "fail_fast"),
            "applies to steps that name their 'needs' (branches); no step here does",
            at="key",
        )
        return None
    return definition


def _step(raw: object, loc: Loc, problems: Problems) -> dict[str, JsonValue] | None:
    before = problems.count
    step, _ = validate_partial(StepModel, raw, loc, problems)
    if step is None or not isinstance(raw, dict):
        return None
    if "id" not in raw:
        problems.add((*loc, "id"), "missing required key 'id'")
    kinds = [key for key in STEP_KINDS if key in raw]
    if len(kinds) != 1:
        if not kinds:
            problems.add(loc, f"a step needs one of: {', '.join(STEP_KINDS)}", at="key")
        else:
            message = f"a step does one thing; this one has {' and '.join(kinds)}"
            problems.add((*loc, kinds[1]), message, at="key")
        return None
    name, options = STEP_KINDS[kinds[0]]
    for option in _STEP_OPTIONS:
        if option in raw and option not in options:
            wrong_timeout = (kinds[0], option) == ("wait_signal", "timeout")
            hint = " (use wait_signal.timeout)" if wrong_timeout else ""
            message = f"'{option}' does not apply to {name} step{hint}"
            problems.add((*loc, option), message, at="key")
    return None if problems.count > before else _step_json(step, loc, problems)


def _step_json(step: StepModel, loc: Loc, problems: Problems) -> dict[str, JsonValue] | None:
    found = _step_kind_json(step, loc, problems)
    if found is not None and step.needs is not None:
        found["needs"] = list(dict.fromkeys(step.needs))
    return found


def _step_kind_json(step: StepModel, loc: Loc, problems: Problems) -> dict[str, JsonValue] | None:
    effect = {
        "timeout_s": _seconds(step.timeout),
        "retry": _retry_json(step.retry),
        "idempotent": bool(step.idempotent),
    }
    if step.run is not None:
        command: dict[str, JsonValue] = {"argv": step.run, "env": step.env or {}, "cwd": step.cwd}
        # Only when given: a flow without them keeps the definition (and version) it had.
        if step.env_inherit:
            command["env_inherit"] = list(dict.fromkeys(step.env_inherit))
        if step.secrets:
            command["secrets"] = {
                name: {"file": s.file} if s.file is not None else {"credential": s.credential}
                for name, s in step.secrets.items()
            }
        return {"id": step.id, "type": "command", **command, **effect}
    if step.python is not None:
        return {"id": step.id, "type": "python", "ref": step.python, **effect}
    if step.sleep is not None:
        return {"id": step.id, "type": "sleep", "duration_s": step.sleep.total_seconds()}
    if step.wait_signal is not None:
        signal, timeout_s = step.wait_signal.name, _seconds(step.wait_signal.timeout)
        return {"id": step.id, "type": "wait_signal", "signal": signal, "timeout_s": timeout_s}
    if step.http is None:
        return None
    http, before = step.http, problems.count
    if http.timeout is not None:
        if step.timeout is not None:
            problems.add((*loc, "http", "timeout"), "timeout is also given on the step", at="key")
        effect["timeout_s"] = _seconds(http.timeout)
    if step.idempotent is None:
        effect["idempotent"] = http.method in _SAFE_METHODS
    request = {"url": http.url, "method": http.method, "headers": http.headers}
    body = to_json(http.body, (*loc, "http", "body"), problems)
    response = {"body": body, "expect_status": http.expect_status}
    if problems.count > before:
        return None
    return {"id": step.id, "type": "http", **request, **response, **effect}


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _retry_json(retry: RetryModel | None) -> dict[str, JsonValue] | None:
    if retry is None:
        return None
    result: dict[str, JsonValue] = {
        "max_attempts": retry.max_attempts,
        "backoff_s": retry.backoff.total_seconds(),
        "max_backoff_s": retry.max_backoff.total_seconds(),
    }
    # Only when given, so that the digest (the version) of existing flows is unchanged.
    if retry.non_retryable_exit_codes:
        result["non_retryable_exit_codes"] = sorted(set(retry.non_retryable_exit_codes))
    if retry.deadline is not None:
        result["deadline_s"] = retry.deadline.total_seconds()
    return result


# ---- shared -------------------------------------------------------------------------


def report_duplicate_ids(items: list[Any], loc: Loc, problems: Problems, *, what: str) -> None:
    """Report each item whose `id` an earlier item of `items` already has."""
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        ident = item.get("id") if isinstance(item, dict) else None
        if not isinstance(ident, str):
            continue
        if ident in first:
            line = problems.line_of((*loc, first[ident], "id"))
            problems.add((*loc, index, "id"), f"duplicate {what} '{ident}' (first at line {line})")
        else:
            first[ident] = index


def to_json(value: object, loc: Loc, problems: Problems) -> JsonValue:
    """`value` as JSON (timestamps as ISO 8601 strings); report what JSON cannot hold."""
    if isinstance(value, dict):
        result: dict[str, JsonValue] = {}
        for key, item in value.items():
            if isinstance(key, str):
                result[key] = to_json(item, (*loc, key), problems)
            else:
                problems.add(
                    (*loc, key), f"a JSON key must be a string, got {describe(key)}", at="key"
                )
        return result
    if isinstance(value, list):
        return [to_json(item, (*loc, index), problems) for index, item in enumerate(value)]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        problems.add(loc, f"{describe(value)} is not a JSON number")
        return None
    if value is None or isinstance(value, str | int | float):
        return value
    problems.add(loc, f"{describe(value)} is not a JSON value")
    return None
