"""The declarations file: YAML in, validated flows and triggers out (DESIGN.md "Declarations").

`load_declarations` either returns every flow and trigger of the file or raises one
`DeclarationError` that lists every problem, each with its file, line, column and key
(`triggers[nightly-backup].catchup.window`). Validation reads the file and the time zone
database only: it never touches the store and never imports the flows' Python code.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.scalarbool import ScalarBoolean

from triggers._declaration_models import (
    ID_PATTERN,
    MAX_ID_LENGTH,
    Anchor,
    CatchupModel,
    DefaultsModel,
    DocumentModel,
    FlowModel,
    Loc,
    RetryModel,
    StepModel,
    TriggerFieldsModel,
    TriggerModel,
    check_id,
    describe,
    parse_duration,
    report_duplicate_ids,
    suggestion,
    to_json,
    validate_partial,
)
from triggers.clock import iso
from triggers.errors import DeclarationError, ScheduleError
from triggers.model import (
    AtSchedule,
    CalendarSchedule,
    Catchup,
    CronSchedule,
    EverySchedule,
    FlowSpec,
    JsonValue,
    Schedule,
    TriggerSpec,
)
from triggers.scheduler.occurrences import compile_schedule

__all__ = ["Declarations", "load_declarations", "parse_declarations", "parse_duration"]

SUPPORTED_VERSION = 1
SCHEDULE_KINDS = ("cron", "every", "calendar", "at")
# Step kind: how messages name it, and which optional step keys it takes.
STEP_KINDS = {
    "run": ("a command", frozenset({"timeout", "retry", "env", "cwd", "idempotent"})),
    "http": ("an http", frozenset({"timeout", "retry", "idempotent"})),
    "python": ("a python", frozenset({"timeout", "retry", "idempotent"})),
    "sleep": ("a sleep", frozenset[str]()),
    "wait_signal": ("a wait_signal", frozenset[str]()),
}
_STEP_OPTIONS = ("timeout", "retry", "env", "cwd", "idempotent")
_SAFE_METHODS = frozenset({"GET", "HEAD"})
_DEFAULT_ZONE = "UTC"
# Keys that TriggerSpec holds under the same name and meaning, copied after merging.
_COPIED_KEYS = sorted(TriggerFieldsModel.model_fields.keys() - {"input", "catchup", "start", "end"})
# A problem in any of these makes compiling the schedule pointless or misleading.
_SCHEDULE_INPUTS = frozenset({"id", "timezone", "start", "end", *SCHEDULE_KINDS})


@dataclass(frozen=True, slots=True, kw_only=True)
class Declarations:
    """A valid declarations file: its flows by name and its triggers in file order."""

    flows: dict[str, FlowSpec]
    triggers: list[TriggerSpec]
    source: str
    digest: str = field(default="", compare=False)
    """A digest of the text the declarations came from (see `text_digest`)."""


def text_digest(text: str) -> str:
    """The digest of a declarations text: equal texts are the same declarations."""
    return hashlib.sha256(text.encode()).hexdigest()


def read_declarations_text(path: str | Path) -> str:
    """A declarations file's text.

    Raises:
        DeclarationError: the file cannot be read or is not UTF-8.
    """
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise _error([_problem(source, 0, 0, "", f"cannot read the file: {reason}")]) from exc
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - data.rfind(b"\n", 0, exc.start)
        problem = _problem(source, line, column, "", "the file is not valid UTF-8")
        raise _error([problem]) from exc


def load_declarations(path: str | Path) -> Declarations:
    """Read and validate a declarations file.

    Raises:
        DeclarationError: the file cannot be read, is not UTF-8, or fails validation;
            `details["problems"]` holds every problem as `{"file", "line", "column",
            "key", "message"}` (line and column are 0 when the problem is the whole file).
    """
    return parse_declarations(read_declarations_text(path), source=str(path))


def parse_declarations(text: str, *, source: str) -> Declarations:
    """Validate declarations given as YAML text; `source` names them in problems.

    Raises:
        DeclarationError: listing every problem found (see `load_declarations`).
    """
    node, tree = _read_yaml(text, source)
    problems = _Collector(source, tree)
    for loc, first_line, mark in _duplicate_keys(node, (), set()):
        message = f"duplicate key '{loc[-1]}' (first at line {first_line})"
        problems.add_at(loc, message, line=mark.line, column=mark.column)
    try:
        data = _plain(tree, frozenset())
    except _SelfReferenceError:
        problems.add((), "the document contains itself through an alias")
        data = None
    declarations = _declarations(data, source, problems)
    problems.raise_if_any()
    return dataclasses.replace(declarations, digest=text_digest(text))


# ---- building -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Context:
    problems: _Collector
    defaults: DefaultsModel | None
    bad_defaults: frozenset[str]
    flows: dict[str, FlowSpec]
    flow_names: list[str] | None  # None: `flows` itself is invalid, references go unchecked


def _declarations(data: object, source: str, problems: _Collector) -> Declarations:
    # Returns what is valid; callers raise first when any problem was reported.
    nothing = Declarations(flows={}, triggers=[], source=source)
    if data is None:
        if not problems.count:
            problems.add((), "the file is empty; it starts with 'version: 1'")
        return nothing
    document, bad = validate_partial(DocumentModel, data, (), problems)
    if document is None or not isinstance(data, dict):
        return nothing
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
    context = _Context(
        problems=problems,
        defaults=defaults,
        bad_defaults=bad_defaults,
        flows=_flows(raw_flows, problems),
        flow_names=None if "flows" in bad else [str(name) for name in raw_flows],
    )
    raw_triggers = document.triggers or []
    triggers = [
        _trigger(raw, ("triggers", index), context) for index, raw in enumerate(raw_triggers)
    ]
    report_duplicate_ids(raw_triggers, ("triggers",), problems, what="trigger id")
    return Declarations(
        flows=context.flows,
        triggers=[trigger for trigger in triggers if trigger is not None],
        source=source,
    )


def _flows(raw_flows: dict[Any, Any], problems: _Collector) -> dict[str, FlowSpec]:
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
    zone, start_at, end_at = fields["timezone"], fields["start_at"], fields["end_at"]
    schedule = _schedule(raw, trigger, loc, zone, problems)
    bounds_ok = start_at is None or end_at is None or end_at > start_at
    bad_defaults = {key for key in context.bad_defaults if key not in raw}
    inputs_ok = not (bad | bad_defaults) & _SCHEDULE_INPUTS
    if schedule is not None and trigger.id is not None and bounds_ok and inputs_ok:
        try:
            compile_schedule(
                schedule, trigger_id=trigger.id, timezone=zone, start_at=start_at, end_at=end_at
            )
        except ScheduleError as exc:
            problems.add((*loc, schedule.kind), exc.message)
    flow = context.flows.get(trigger.flow or "")
    if problems.count > before or trigger.id is None or flow is None or schedule is None:
        return None
    return TriggerSpec(
        id=trigger.id, flow=flow.name, flow_version=flow.version, schedule=schedule, **fields
    )


def _merged_fields(
    trigger: TriggerModel, loc: Loc, defaults: DefaultsModel | None, problems: _Collector
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
    raw: dict[Any, Any], trigger: TriggerModel, loc: Loc, zone: str, problems: _Collector
) -> Schedule | None:
    kinds = [kind for kind in SCHEDULE_KINDS if kind in raw]
    if not kinds:
        problems.add(loc, "no schedule: give one of cron, every, calendar, at", at="key")
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
    return None  # the schedule's value was invalid and is reported already


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


def _flow_definition(raw: object, loc: Loc, problems: _Collector) -> dict[str, JsonValue] | None:
    """The canonical JSON definition of one flow, or None once its problems are reported.

    The durable runtime interprets this JSON and its digest versions the flow, so its
    keys are a contract (DESIGN.md) and it keeps no trace of the YAML's formatting.
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
    return None if problems.count > before else {"kind": "steps", "steps": steps}


def _step(raw: object, loc: Loc, problems: _Collector) -> dict[str, JsonValue] | None:
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


def _step_json(step: StepModel, loc: Loc, problems: _Collector) -> dict[str, JsonValue] | None:
    effect = {
        "timeout_s": _seconds(step.timeout),
        "retry": _retry_json(step.retry),
        "idempotent": bool(step.idempotent),
    }
    if step.run is not None:
        command = {"argv": step.run, "env": step.env or {}, "cwd": step.cwd}
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


# ---- YAML and locations -------------------------------------------------------------

_QUOTE_HINT = "; quote a value that starts with '*', '@' or '`', like cron: \"*/5 * * * *\""


def _read_yaml(text: str, source: str) -> tuple[Node | None, Any]:
    yaml = YAML(typ="rt")
    # Duplicate keys are found on the node tree instead, so every one of them is reported.
    yaml.allow_duplicate_keys = True
    try:
        node = yaml.compose(text)
        # What `yaml.load` does after composing; composing once serves both uses.
        return node, None if node is None else yaml.constructor.construct_document(node)
    except MarkedYAMLError as exc:
        message = ": ".join(str(part) for part in (exc.context, exc.problem) if part)
        mark = exc.problem_mark or exc.context_mark
        if exc.context == "while scanning an alias" or "'@'" in message or "'`'" in message:
            message += _QUOTE_HINT
            mark = exc.context_mark or mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise _error([_problem(source, line, column, "", f"invalid YAML: {message}")]) from None
    except YAMLError as exc:
        raise _error([_problem(source, 1, 1, "", f"invalid YAML: {exc}")]) from None


def _duplicate_keys(node: Node | None, loc: Loc, seen: set[int]) -> Iterator[tuple[Loc, int, Any]]:
    # An alias shares its node: visiting it once reports its duplicates once.
    if node is None or id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, MappingNode):
        first: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, ScalarNode) else None
            if key is None or key == "<<":
                continue
            if key in first:
                yield (*loc, key), first[key], key_node.start_mark
            else:
                first[key] = key_node.start_mark.line + 1
            yield from _duplicate_keys(value_node, (*loc, key), seen)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            yield from _duplicate_keys(item, (*loc, index), seen)


def _plain(value: object, active: frozenset[int]) -> object:
    """The YAML tree as builtins, keys and order kept: what the validators see."""
    if isinstance(value, Mapping | list):
        if id(value) in active:
            raise _SelfReferenceError
        inner = active | {id(value)}
        if isinstance(value, Mapping):
            return {_plain_key(key): _plain(item, inner) for key, item in value.items()}
        return [_plain(item, inner) for item in value]
    # ruamel's scalar subclasses carry formatting state; strict validation wants builtins.
    if isinstance(value, bool | ScalarBoolean):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, datetime):
        return datetime.combine(value.date(), value.timetz())
    return value  # dates, null, and what JSON cannot hold (bytes, sets, tags) for validators


def _plain_key(key: object) -> object:
    return _plain(key, frozenset()) if isinstance(key, bool | int | float | str) else key


class _SelfReferenceError(Exception):
    """The YAML tree contains itself (a recursive alias), so it has no plain form."""


class _Collector:
    """The problems of one document, located in its YAML tree (implements `Problems`)."""

    def __init__(self, source: str, tree: object) -> None:
        self._source = source
        self._tree = tree
        self._found: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._count = 0

    @property
    def count(self) -> int:
        return self._count

    def add(self, loc: Loc, message: str, *, at: Anchor = "value") -> None:
        line, column, key_loc = _locate(self._tree, loc, at)
        self.add_at(key_loc, message, line=line, column=column)

    def add_at(self, loc: Loc, message: str, *, line: int, column: int) -> None:
        """Add a problem at a 0-based position the caller already knows."""
        self._count += 1
        problem = _problem(self._source, line + 1, column + 1, _key_path(self._tree, loc), message)
        # Each trigger that inherits a bad default reports it again; show it once.
        self._found.setdefault(tuple(problem.values()), problem)

    def line_of(self, loc: Loc) -> int:
        return _locate(self._tree, loc, "value")[0] + 1

    def raise_if_any(self) -> None:
        if self._found:
            found = self._found.values()
            raise _error(sorted(found, key=lambda problem: (problem["line"], problem["column"])))


def _locate(tree: object, loc: Loc, at: Anchor) -> tuple[int, int, Loc]:
    """The 0-based line and column of `loc`, and the part of `loc` that names a key.

    A key that is absent (a missing key) points at the mapping that lacks it; a path
    that runs below a scalar (shorthands like `every: 90s`) points at the scalar.
    """
    node, key_at, value_at = tree, (0, 0), (0, 0)
    for depth, element in enumerate(loc):
        if element == "[key]":  # pydantic's marker for a problem with a mapping key
            return (*key_at, loc[:depth])
        if isinstance(node, CommentedMap) and element in node:
            where = node.lc.data.get(element)  # absent for keys brought in by a `<<` merge
            if where is not None:
                key_at, value_at = (where[0], where[1]), (where[2], where[3])
        elif isinstance(node, CommentedSeq) and isinstance(element, int) and element < len(node):
            where = node.lc.data.get(element)
            if where is not None:
                key_at = value_at = (where[0], where[1])
        elif isinstance(node, Mapping):
            return (*key_at, tuple(part for part in loc if part != "[key]"))
        else:
            return (*value_at, loc[:depth])
        node = node[element]
    # A mapping or list value starts on the line after its key in block style, and a
    # null value has no position of its own: both read better at their key.
    use_key = at == "key" or node is None or isinstance(node, Mapping | list)
    return (*(key_at if use_key else value_at), loc)


def _key_path(tree: object, loc: Loc) -> str:
    """`triggers[nightly-backup].catchup.window`: list items by their unique id, else index."""
    text, node = "", tree
    for element in loc:
        if isinstance(element, int) and isinstance(node, list):
            text += f"[{_item_label(node, element)}]"
        else:
            text += f".{element}" if text else str(element)
        node = _child(node, element)
    return text


def _child(node: object, element: str | int) -> object:
    if isinstance(node, Mapping) and element in node:
        return node[element]
    if isinstance(node, list) and isinstance(element, int) and element < len(node):
        return node[element]
    return None


def _item_label(items: list[Any], index: int) -> str:
    item = items[index] if index < len(items) else None
    ident = item.get("id") if isinstance(item, Mapping) else None
    if not isinstance(ident, str) or len(ident) > MAX_ID_LENGTH or not ID_PATTERN.fullmatch(ident):
        return str(index)
    same = [other for other in items if isinstance(other, Mapping) and other.get("id") == ident]
    return ident if len(same) == 1 else str(index)


def _problem(source: str, line: int, column: int, key: str, message: str) -> dict[str, Any]:
    return {"file": source, "line": line, "column": column, "key": key, "message": message}


def _error(problems: list[dict[str, Any]]) -> DeclarationError:
    lines = []
    for problem in problems:
        where = problem["file"]
        if problem["line"]:
            where += f":{problem['line']}:{problem['column']}"
        key = f" {problem['key']}:" if problem["key"] else ""
        lines.append(f"{where}:{key} {problem['message']}")
    return DeclarationError("\n".join(lines), problems=problems)
