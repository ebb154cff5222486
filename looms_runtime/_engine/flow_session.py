"""A session of a Python flow: one run of its function from the top, on an effect thread.

The session replays the run's journal (what each call through `ctx` answered
before) and asks the run's worker for every new durable move: dispatch a step,
record a failure, start a wait, finish. A move that must be durable before the
flow goes on (a dispatch, a failure) waits for the worker's answer, which comes
after the commit. A step's success is not waited for: it rides with the next ask
(one commit per step, like a steps flow), and a crash before that ask leaves the
step in flight, hence ambiguous, which is the truth.

Sleeps, signal waits and retry backoffs end the session (its thread is released);
the worker starts a new session when the run has something to do again.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

import structlog

from looms_runtime._cancel import CancelToken
from looms_runtime._canonical import json_copy
from looms_runtime._clock import from_ms
from looms_runtime._effects.python import call_step, resolve, wants_context
from looms_runtime._history.definitions import RetryPolicy
from looms_runtime._history.events import EventType, NewEvent, new_event
from looms_runtime._history.outcome import EffectResult
from looms_runtime.errors import InvalidRequestError, NondeterminismError
from looms_runtime.flow import FlowContext, StepFailedError, WaitTimeoutError
from looms_runtime.records import StepContext

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class Frontier:
    """A step outstanding at the journal's end when the session starts (due for a retry)."""

    name: str
    attempt: int


@dataclass(frozen=True, slots=True)
class AskDispatch:
    name: str
    position: int
    attempt: int
    idempotent: bool
    timeout_s: float | None
    retry: RetryPolicy | None


@dataclass(frozen=True, slots=True)
class AskFailed:
    result: EffectResult
    retry: RetryPolicy | None


@dataclass(frozen=True, slots=True)
class AskWait:
    kind: str
    name: str
    position: int
    duration_ms: int | None


@dataclass(frozen=True, slots=True)
class AskFinish:
    ok: bool
    result: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class AskStop:
    reason: str


Move: TypeAlias = AskDispatch | AskFailed | AskWait | AskFinish | AskStop
Reply: TypeAlias = tuple[str, Mapping[str, Any] | None]
"""`("go"|"raise"|"suspend"|"stop", journal entry of a failure to raise or None)`."""


@dataclass(frozen=True, slots=True)
class FlowAsk:
    """A session's request to its run's worker.

    `outcome` is the success of the step the session ran last, not yet recorded;
    `values` are the `now`/`new_id` answers recorded since (in call order).
    """

    session: FlowSession
    move: Move
    outcome: EffectResult | None
    values: tuple[NewEvent, ...]
    reply: Future[Reply] | None


class _Unwind(BaseException):
    """Ends the flow function's frame: the session is over (a wait, a cancel, a stop).

    A BaseException, so that flow code catching `Exception` does not swallow it.
    """

    def __init__(self, *, told: bool) -> None:
        super().__init__("flow session ended")
        self.told = told  # the worker already knows the session ended


def effect_id_of(name: str, position: int) -> str:
    """A flow step's effect id: its name and its position in the journal (unique per run)."""
    return f"{name}#{position}"


class FlowSession:
    """See the module docstring; `run` is the session's thread body."""

    def __init__(
        self,
        *,
        run_id: str,
        ref: str,
        input_json: str,
        journal: tuple[Mapping[str, Any], ...],
        frontier: Frontier | None,
        flow_version: str | None,
        clock_ms: Callable[[], int],
        submit: Callable[[FlowAsk], bool],
    ) -> None:
        self.run_id = run_id
        self.flow_version = flow_version
        self.token = CancelToken()
        self._ref = ref
        self._input_json = input_json
        self._journal = list(journal)
        self._recorded = len(journal)
        self._frontier = frontier
        self._clock_ms = clock_ms
        self._submit = submit
        self._position = 0
        self._outcome: EffectResult | None = None
        self._values: list[NewEvent] = []
        self._ended = False
        self._violation: str | None = None

    def run(self) -> None:
        try:
            function, _ = resolve(self._ref)
        except Exception as exc:  # noqa: BLE001 - an import failure fails the run, loudly
            self._finish(AskFinish(ok=False, error=f"cannot load flow {self._ref}: {exc!r}"))
            return
        try:
            returned = function(FlowContext(self), json.loads(self._input_json))
        except _Unwind as unwind:
            if not unwind.told and not self._ended:
                self._finish(AskStop("cancelled"))
            return
        except Exception as exc:  # noqa: BLE001 - the flow's own failure fails its run
            error = str(exc) if isinstance(exc, StepFailedError) else f"{type(exc).__name__}: {exc}"
            self._finish(AskFinish(ok=False, error=self._violation or error))
            return
        if self._ended:
            return  # the function swallowed an unwind; its session was over already
        self._returned(returned)

    def _returned(self, returned: Any) -> None:
        if self._violation is None and (self._position < self._recorded or self._frontier):
            self._violation = (
                f"the flow returned after {self._position} calls; "
                f"its log recorded {max(self._recorded, self._position + 1)}"
            )
        if self._violation is not None:
            self._finish(AskFinish(ok=False, error=self._violation))
            return
        try:
            result = json_copy(returned)
        except InvalidRequestError as exc:
            self._finish(AskFinish(ok=False, error=f"the flow returned {exc.message}"))
            return
        self._finish(AskFinish(ok=True, result=result))

    # -- calls through ctx -------------------------------------------------------

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        idempotent: bool,
        retry: RetryPolicy | None,
        non_retryable: tuple[type[BaseException], ...],
        timeout_s: float | None,
    ) -> Any:
        entry = self._replayed("step", name)
        if entry is not None:
            if entry["ok"]:
                return _copy(entry.get("output"))
            raise StepFailedError(name, entry.get("error"), int(entry.get("attempts", 1)))
        position, attempt = self._position, 1
        if self._frontier is not None:
            attempt, self._frontier = self._frontier.attempt + 1, None
        move = AskDispatch(name, position, attempt, idempotent, timeout_s, retry)
        verb, detail = self._ask(move)
        if verb != "go":
            raise _Unwind(told=True)
        # The worker's limit: the step's timeout, or less when its deadline comes first.
        limit = None if detail is None else detail.get("timeout_s")
        result = self._call(fn, args, kwargs, name, position, attempt, limit, non_retryable)
        if result.ok:
            self._outcome = result
            self._record({"kind": "step", "name": name, "ok": True, "output": result.output})
            return _copy(result.output)
        verb, failure = self._ask(AskFailed(result, retry))
        if verb != "raise" or failure is None:
            raise _Unwind(told=True)
        self._record(failure)
        raise StepFailedError(name, failure.get("error"), int(failure.get("attempts", 1)))

    def sleep(self, seconds: float) -> None:
        if self._replayed("sleep", None) is not None:
            return
        self._wait(AskWait("sleep", "sleep", self._position, max(0, round(seconds * 1000))))

    def wait_signal(self, name: str, timeout_s: float | None) -> Any:
        entry = self._replayed("signal", name)
        if entry is None:
            duration = None if timeout_s is None else max(0, round(timeout_s * 1000))
            self._wait(AskWait("signal", name, self._position, duration))
        assert entry is not None  # noqa: S101 - _wait never returns
        if entry.get("timed_out"):
            raise WaitTimeoutError(name)
        return _copy(entry.get("payload"))

    def now(self) -> datetime:
        return from_ms(int(self._value("now", self._clock_ms)))

    def new_id(self) -> str:
        return str(self._value("new_id", lambda: str(uuid.uuid4())))

    # -- replay ------------------------------------------------------------------

    def _guard(self) -> None:
        if self._ended:
            raise _Unwind(told=True)
        if self._violation is not None:
            raise NondeterminismError(self._violation, run_id=self.run_id)
        if self.token.cancelled:
            raise _Unwind(told=False)

    def _replayed(self, kind: str, name: str | None) -> Mapping[str, Any] | None:
        """The recorded answer at the current position, or None at the frontier.

        Raises:
            NondeterminismError: the log recorded another call at this position.
        """
        self._guard()
        position = self._position
        if position < len(self._journal):
            entry = self._journal[position]
            if entry["kind"] != kind or (name is not None and entry.get("name") != name):
                self._violate(position, kind, name, f"{entry['kind']} {entry.get('name')!r}")
            self._position += 1
            return entry
        if self._frontier is not None and kind != "step":
            self._violate(position, kind, name, f"step {self._frontier.name!r}")
        if self._frontier is not None and self._frontier.name != name:
            self._violate(position, kind, name, f"step {self._frontier.name!r}")
        return None

    def _violate(self, position: int, kind: str, name: str | None, recorded: str) -> None:
        asked = f"{kind} {name!r}" if name is not None else kind
        self._violation = (
            f"replay of call {position} asked for {asked}; the log recorded {recorded} "
            f"({NondeterminismError.code})"
        )
        log.error("flow_nondeterministic", run_id=self.run_id, position=position)
        raise NondeterminismError(self._violation, run_id=self.run_id, position=position)

    def _record(self, entry: Mapping[str, Any]) -> None:
        self._journal.append(entry)
        self._position += 1

    def _value(self, kind: str, make: Callable[[], Any]) -> Any:
        entry = self._replayed(kind, None)
        if entry is not None:
            return entry["value"]
        value = make()
        self._values.append(
            new_event(
                EventType.FLOW_VALUE_RECORDED, position=self._position, kind=kind, value=value
            )
        )
        self._record({"kind": kind, "value": value})
        return value

    # -- the worker --------------------------------------------------------------

    def _ask(self, move: Move) -> Reply:
        reply: Future[Reply] = Future()
        if not self._send(move, reply):
            reply.set_result(("stop", None))
        return reply.result()

    def _send(self, move: Move, reply: Future[Reply] | None) -> bool:
        ask = FlowAsk(self, move, self._outcome, tuple(self._values), reply)
        self._outcome, self._values = None, []
        return self._submit(ask)

    def _wait(self, move: AskWait) -> None:
        self._finish(move)
        raise _Unwind(told=True)

    def _finish(self, move: Move) -> None:
        """Send the session's last ask; nothing the function does afterwards counts."""
        if not self._ended:
            self._ended = True
            self._send(move, None)

    def _call(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        name: str,
        position: int,
        attempt: int,
        timeout_s: float | None,
        non_retryable: tuple[type[BaseException], ...],
    ) -> EffectResult:
        effect_id = effect_id_of(name, position)
        call_kwargs = dict(kwargs)
        if "context" not in call_kwargs and wants_context(fn):
            call_kwargs["context"] = StepContext(
                run_id=self.run_id,
                step_id=name,
                attempt=attempt,
                idempotency_key=f"{self.run_id}:{effect_id}",
                _token=self.token,
            )
        ids: dict[str, Any] = {"effect_id": effect_id, "attempt": attempt}
        result = call_step(
            functools.partial(fn, *args, **call_kwargs),
            ids,
            timeout_s=timeout_s,
            non_retryable=non_retryable,
        )
        if result.ok or not self.token.cancelled:
            return result
        return dataclasses.replace(result, cancelled=True)


def _copy(value: Any) -> Any:
    """A private copy of a recorded value: the flow may mutate what it gets back."""
    return json.loads(json.dumps(value))
