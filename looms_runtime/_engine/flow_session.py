"""A session of a Python flow: one run of its function from the top, on an effect thread.

The session replays the run's journal (what each call through `ctx` answered
before) and asks the run's worker for every new durable move: dispatch a step,
record a failure, start a wait, finish. A move that must be durable before the
flow goes on (a dispatch, a failure) waits for the worker's answer, which comes
after the commit. A step's success is not waited for: it rides with the next ask
(one commit per step, like a steps flow), and a crash before that ask leaves the
step in flight, hence ambiguous, which is the truth.

Sleeps, signal waits and retry backoffs end the session (its thread is released);
the worker starts a new session when the run has something to do again. The
branches of a `parallel` call run on threads of their own (`flow_branches`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime
from typing import Any

import structlog

from looms_runtime._cancel import CancelToken
from looms_runtime._canonical import json_copy
from looms_runtime._clock import from_ms
from looms_runtime._effects.python import call_step, resolve, wants_context
from looms_runtime._engine.flow_asks import (
    AskDispatch,
    AskFailed,
    AskFinish,
    AskStop,
    AskWait,
    FlowAsk,
    Frontier,
    GroupSpec,
    GroupView,
    Move,
    Reply,
    Unwind,
    effect_id_of,
)
from looms_runtime._engine.flow_branches import ParallelCall
from looms_runtime._history.definitions import RetryPolicy
from looms_runtime._history.events import EventType, NewEvent, new_event
from looms_runtime._history.outcome import EffectResult
from looms_runtime._history.parallel import BRANCH
from looms_runtime._history.state import failed
from looms_runtime.errors import InvalidRequestError, NondeterminismError
from looms_runtime.flow import Branch, FlowContext, StepFailedError, WaitTimeoutError
from looms_runtime.records import StepContext

__all__ = ["FlowAsk", "FlowSession", "Frontier", "effect_id_of"]

log = structlog.get_logger()


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
        group: GroupView | None = None,
        spawn: Callable[[Callable[[], None]], None] | None = None,
        on_outcome: Callable[[EffectResult], None] | None = None,
    ) -> None:
        self.run_id = run_id
        self.flow_version = flow_version
        self.token = CancelToken()
        self._ref = ref
        self._input_json = input_json
        self._journal = list(journal)
        self._recorded = len(journal)
        self._frontier = frontier
        self._group = group
        self._spawn = spawn or _thread
        self._on_outcome = on_outcome
        self._clock_ms = clock_ms
        self._submit = submit
        self._position = 0
        self._outcome: EffectResult | None = None
        self._values: list[NewEvent] = []
        self._ended = False
        self._violation: str | None = None
        self._thread: int | None = None

    def run(self) -> None:
        self._thread = threading.get_ident()
        try:
            function, _ = resolve(self._ref)
        except Exception as exc:  # noqa: BLE001 - an import failure fails the run, loudly
            self.finish(AskFinish(ok=False, error=f"cannot load flow {self._ref}: {exc!r}"))
            return
        try:
            returned = function(FlowContext(self), json.loads(self._input_json))
        except Unwind as unwind:
            if not unwind.told and not self._ended:
                self.finish(AskStop("cancelled"))
            return
        except Exception as exc:  # noqa: BLE001 - the flow's own failure fails its run
            error = str(exc) if isinstance(exc, StepFailedError) else f"{type(exc).__name__}: {exc}"
            self.finish(AskFinish(ok=False, error=self._violation or error))
            return
        if self._ended:
            return  # the function swallowed an unwind; its session was over already
        self._returned(returned)

    def _returned(self, returned: Any) -> None:
        unreached = self._position < self._recorded or self._frontier or self._group
        if self._violation is None and unreached:
            self._violation = (
                f"the flow returned after {self._position} calls; "
                f"its log recorded {max(self._recorded, self._position + 1)}"
            )
        if self._violation is not None:
            self.finish(AskFinish(ok=False, error=self._violation))
            return
        try:
            result = json_copy(returned)
        except InvalidRequestError as exc:
            self.finish(AskFinish(ok=False, error=f"the flow returned {exc.message}"))
            return
        self.finish(AskFinish(ok=True, result=result))

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
        verb, detail = self.ask(move)
        if verb != "go":
            raise Unwind(told=True)
        # The worker's limit: the step's timeout, or less when its deadline comes first.
        limit = None if detail is None else detail.get("timeout_s")
        result = self._call(fn, args, kwargs, name, position, attempt, limit, non_retryable)
        result = self._cancelled(result, self.token)
        if result.ok:
            self._outcome = result
            if self._on_outcome is not None:
                # Known at once where the session runs in a worker process: should it
                # die before the next ask, the step's success is still recorded.
                self._on_outcome(result)
            self._record({"kind": "step", "name": name, "ok": True, "output": result.output})
            return _copy(result.output)
        verb, failure = self.ask(AskFailed(result, retry))
        if verb != "raise" or failure is None:
            raise Unwind(told=True)
        self._record(failure)
        raise StepFailedError(name, failure.get("error"), int(failure.get("attempts", 1)))

    def parallel(
        self, branches: tuple[Branch, ...], *, max_parallel: int, fail_fast: bool
    ) -> list[Any]:
        self._guard()
        if not branches:
            return []
        position, names = self._position, tuple(branch.name for branch in branches)
        asked = f"parallel {list(names)!r}"
        if position < len(self._journal):
            entries = self._journal[position : position + len(names)]
            if [(e["kind"], e.get("name"), e.get("of")) for e in entries] != [
                (BRANCH, name, len(names)) for name in names
            ]:
                self._violate(position, asked, self._recorded_at(position))
            self._position += len(names)
            return _joined(entries)
        view, self._group = self._group, None
        if view is not None and view.spec.names != names:
            self._violate(position, asked, f"parallel {list(view.spec.names)!r}")
        if self._frontier is not None:
            self._violate(position, asked, f"step {self._frontier.name!r}")
        spec = view.spec if view else GroupSpec(names, fail_fast, max_parallel)
        entries = ParallelCall(self, position, branches, spec, view).run()
        self._journal.extend(entries)
        self._position += len(names)
        self._guard()  # a cancel that stopped the branches stops the flow here
        return _joined(entries)

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
        if self._thread is not None and threading.get_ident() != self._thread:
            # A step or branch calling back into ctx would race the flow's own calls.
            raise RuntimeError("ctx is the flow's own: its steps and branches may not call it")
        if self._ended:
            raise Unwind(told=True)
        if self._violation is not None:
            raise NondeterminismError(self._violation, run_id=self.run_id)
        if self.token.cancelled:
            raise Unwind(told=False)

    def _replayed(self, kind: str, name: str | None) -> Mapping[str, Any] | None:
        """The recorded answer at the current position, or None at the frontier.

        Raises:
            NondeterminismError: the log recorded another call at this position.
        """
        self._guard()
        position = self._position
        asked = f"{kind} {name!r}" if name is not None else kind
        if position < len(self._journal):
            entry = self._journal[position]
            if entry["kind"] != kind or (name is not None and entry.get("name") != name):
                self._violate(position, asked, self._recorded_at(position))
            self._position += 1
            return entry
        if self._group is not None:
            self._violate(position, asked, f"parallel {list(self._group.spec.names)!r}")
        if self._frontier is not None and (kind != "step" or self._frontier.name != name):
            self._violate(position, asked, f"step {self._frontier.name!r}")
        return None

    def _recorded_at(self, position: int) -> str:
        entry = self._journal[position]
        if entry["kind"] == BRANCH:
            group = self._journal[position : position + int(entry["of"])]
            return f"parallel {[e.get('name') for e in group]!r}"
        return f"{entry['kind']} {entry.get('name')!r}"

    def _violate(self, position: int, asked: str, recorded: str) -> None:
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

    def clock_ms(self) -> int:
        return self._clock_ms()

    def spawn(self, task: Callable[[], None]) -> None:
        """Run `task` (a branch's attempt) on a thread of its own."""
        self._spawn(task)

    def call_branch(
        self, branch: Branch, position: int, attempt: int, limit_s: float | None, token: CancelToken
    ) -> EffectResult:
        """Run one attempt of a `parallel` call's branch (on the branch's thread)."""
        result = self._call(
            branch.fn,
            branch.args,
            branch.kwargs,
            branch.name,
            position,
            attempt,
            limit_s,
            branch.non_retryable,
            token=token,
        )
        return self._cancelled(result, token)

    def ask(self, move: Move) -> Reply:
        """Send `move` and wait for the worker's answer (sent once its events committed)."""
        reply: Future[Reply] = Future()
        if not self._send(move, reply):
            reply.set_result(("stop", None))
        return reply.result()

    def _send(self, move: Move, reply: Future[Reply] | None) -> bool:
        ask = FlowAsk(self, move, self._outcome, tuple(self._values), reply)
        self._outcome, self._values = None, []
        return self._submit(ask)

    def _wait(self, move: AskWait) -> None:
        self.finish(move)
        raise Unwind(told=True)

    def finish(self, move: Move) -> None:
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
        *,
        token: CancelToken | None = None,
    ) -> EffectResult:
        effect_id = effect_id_of(name, position)
        call_kwargs = dict(kwargs)
        if "context" not in call_kwargs and wants_context(fn):
            call_kwargs["context"] = StepContext(
                run_id=self.run_id,
                step_id=name,
                attempt=attempt,
                idempotency_key=f"{self.run_id}:{effect_id}",
                _token=token or self.token,
            )
        ids: dict[str, Any] = {"effect_id": effect_id, "attempt": attempt}
        return call_step(
            functools.partial(fn, *args, **call_kwargs),
            ids,
            timeout_s=timeout_s,
            non_retryable=non_retryable,
        )

    @staticmethod
    def _cancelled(result: EffectResult, token: CancelToken) -> EffectResult:
        """A failure under a cancel request is the attempt's stop, not its own failure."""
        if result.ok or not token.cancelled:
            return result
        return dataclasses.replace(result, cancelled=True)


def _joined(entries: Sequence[Mapping[str, Any]]) -> list[Any]:
    """What a joined `parallel` call returns, or the failure it raises."""
    stopped = next((e for e in entries if failed(e)), None) or next(
        (e for e in entries if not e["ok"]), None
    )
    if stopped is not None:
        error, attempts = stopped.get("error"), int(stopped.get("attempts", 1))
        raise StepFailedError(str(stopped["name"]), error, attempts)
    return [_copy(entry.get("output")) for entry in entries]


def _thread(task: Callable[[], None]) -> None:
    threading.Thread(target=task, name="looms-branch", daemon=True).start()


def _copy(value: Any) -> Any:
    """A private copy of a recorded value: the flow may mutate what it gets back."""
    return json.loads(json.dumps(value))
