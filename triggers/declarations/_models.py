"""The shapes of the declarations file, one pydantic model per mapping.

Pydantic checks each mapping on its own (types, ranges, unknown keys); the rules
that relate several keys live in `_specs.py`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from triggers.declarations._values import (
    AlertEventName,
    Argv,
    Count,
    DateRange,
    Duration,
    EnvName,
    HttpMethod,
    Id,
    InheritedName,
    Instant,
    NonEmpty,
    Ref,
    Span,
    Status,
    Text,
    Url,
    Weekday,
    YearlyRange,
    Zone,
    every_shorthand,
)
from triggers.durations import format_duration
from triggers.model import CatchupPolicy, Overlap


class _Model(BaseModel):
    # Strict: YAML already types its scalars, so "yes" or "1" where a bool or an integer
    # belongs is a mistake to report, not to coerce.
    model_config = ConfigDict(extra="forbid", strict=True)

    nullable: ClassVar[frozenset[str]] = frozenset()
    """Keys whose explicit `null` means something; elsewhere `null` is an error."""

    @field_validator("*", mode="before")
    @classmethod
    def _reject_null(cls, value: object, info: ValidationInfo) -> object:
        if value is None and info.field_name not in cls.nullable:
            raise ValueError("needs a value (leave the key out to use the default)")
        return value


class CatchupModel(_Model):
    """`catchup:` of a trigger or of `defaults`; unset keys fall back key by key."""

    policy: Annotated[CatchupPolicy, Strict(False)] | None = None
    window: Duration | None = None
    grace: Span | None = None


class AlertRuleModel(_Model):
    """`alert:` of a trigger or of `defaults`; unset keys fall back key by key."""

    to: list[Id] | None = None
    on: list[AlertEventName] | None = None
    late: Duration | None = None
    stuck: Duration | None = None
    repeat: Duration | None = None


class WebhookChannelModel(_Model):
    """`webhook:` of a channel: a JSON POST."""

    url: Url
    headers_file: NonEmpty | None = None


class EmailChannelModel(_Model):
    """`email:` of a channel; the SMTP server and sender come from the environment."""

    to: Annotated[list[NonEmpty], Field(min_length=1)]
    subject_prefix: Text | None = None


class ChannelModel(_Model):
    """One value of `alerts.channels`: exactly one of webhook, email, command."""

    webhook: WebhookChannelModel | None = None
    email: EmailChannelModel | None = None
    command: Argv | None = None
    timeout: Duration | None = None


class AlertsModel(_Model):
    """`alerts:` of the document; channels are validated one by one by the caller."""

    nullable = frozenset({"channels"})

    channels: dict[Any, Any] | None = None


class TriggerFieldsModel(_Model):
    """The trigger keys `defaults` may set too; `None` means "not given"."""

    nullable = frozenset({"input", "description", "start", "end", "max_runs"})

    timezone: Zone | None = None
    overlap: Annotated[Overlap, Strict(False)] | None = None
    max_active: Count | None = None
    max_buffer: Count | None = None
    catchup: CatchupModel | None = None
    jitter: Span | None = None
    input: Any = None
    enabled: bool | None = None
    description: str | None = None
    start: Instant | None = None
    end: Instant | None = None
    max_runs: Count | None = None
    pause_on_failure: bool | None = None
    alert: AlertRuleModel | None = None
    exclude: list[Id] | None = None
    only: list[Id] | None = None
    pool: Id | None = None


class PoolModel(_Model):
    """One value of `pools:`: how many runs of its members may be active at once."""

    slots: Count


class HolidaysModel(_Model):
    """`holidays:` of a calendar: a country's public holidays (the `holidays` package)."""

    country: Annotated[str, StringConstraints(pattern=r"^[A-Z]{2,3}$")]
    subdiv: NonEmpty | None = None
    language: NonEmpty | None = None
    categories: list[NonEmpty] | None = None


class NamedCalendarModel(_Model):
    """One value of `calendars:`: the days (or times) it holds, each key adding to them."""

    holidays: HolidaysModel | None = None
    dates: list[DateRange] | None = None
    yearly: list[YearlyRange] | None = None
    weekdays: list[Weekday] | None = None
    cron: list[NonEmpty] | None = None
    timezone: Zone | None = None
    description: str | None = None


class DefaultsModel(TriggerFieldsModel):
    """`defaults:` of the document."""


class EveryModel(_Model):
    """`every:`; a bare duration is shorthand for `{interval: ...}`."""

    interval: Duration
    start: Instant | None = None


class UpstreamModel(_Model):
    """One upstream of `after: {all: [...]}` or `{any: [...]}`."""

    trigger: Id
    outcome: Literal["completed", "failed", "settled"] = "completed"


class AfterModel(_Model):
    """`after:`: the trigger fires on the settled runs of its upstream(s).

    Exactly one form: `trigger` (with `outcome`), `all: [...]` (with `within`) or
    `any: [...]`."""

    trigger: Id | None = None
    outcome: Literal["completed", "failed", "settled"] | None = None
    all_of: list[UpstreamModel] | None = Field(default=None, alias="all")
    any_of: list[UpstreamModel] | None = Field(default=None, alias="any")
    within: Duration | None = None

    @model_validator(mode="after")
    def _one_form(self) -> AfterModel:
        forms = [
            name
            for name, value in (
                ("trigger", self.trigger),
                ("all", self.all_of),
                ("any", self.any_of),
            )
            if value is not None
        ]
        if not forms:
            raise ValueError("needs its upstream: trigger, or a list under all or any")
        if len(forms) > 1:
            raise ValueError(f"give one of trigger, all or any, not {' and '.join(forms)}")
        if self.outcome is not None and self.trigger is None:
            raise ValueError("outcome goes with trigger; in all/any each upstream has its own")
        listed = self.all_of if self.all_of is not None else self.any_of
        if listed is not None:
            if not listed:
                raise ValueError(f"{forms[0]} needs at least one upstream")
            names = [upstream.trigger for upstream in listed]
            twice = sorted({name for name in names if names.count(name) > 1})
            if twice:
                raise ValueError(f"{forms[0]} lists {', '.join(twice)} more than once")
        if self.all_of is not None and self.within is None:
            raise ValueError("all needs within: how long an upstream run counts (e.g. 6h)")
        if self.all_of is None and self.within is not None:
            raise ValueError("within goes with all (any and trigger fire on every run)")
        return self

    def upstreams(self) -> list[UpstreamModel]:
        """The upstreams, whatever the form."""
        if self.trigger is not None:
            return [UpstreamModel(trigger=self.trigger, outcome=self.outcome or "completed")]
        return list(self.all_of or self.any_of or [])


class RequiresModel(_Model):
    """`requires:`: a scheduled occurrence runs only when `trigger` settled with
    `outcome` within `since` before it."""

    trigger: Id
    outcome: Literal["completed", "failed", "settled"] = "completed"
    since: Duration


class CalendarModel(_Model):
    """`calendar:`: an interval of years/months/weeks/days at a wall-clock time."""

    years: Annotated[int, Field(ge=0)] = 0
    months: Annotated[int, Field(ge=0)] = 0
    weeks: Annotated[int, Field(ge=0)] = 0
    days: Annotated[int, Field(ge=0)] = 0
    day: Annotated[int, Field(ge=1, le=31)] | None = None
    hour: Annotated[int, Field(ge=0, le=23)] = 0
    minute: Annotated[int, Field(ge=0, le=59)] = 0
    second: Annotated[int, Field(ge=0, le=59)] = 0
    start: Instant | None = None

    @model_validator(mode="after")
    def _has_interval(self) -> CalendarModel:
        if not (self.years or self.months or self.weeks or self.days):
            raise ValueError("a calendar needs an interval: years, months, weeks or days")
        return self


class TriggerModel(TriggerFieldsModel):
    """One item of `triggers:`; required keys are checked by the caller."""

    id: Id | None = None
    flow: str | None = None
    cron: NonEmpty | None = None
    every: Annotated[EveryModel, BeforeValidator(every_shorthand)] | None = None
    calendar: CalendarModel | None = None
    at: Instant | None = None
    after: AfterModel | None = None
    requires: RequiresModel | None = None


class RetryModel(_Model):
    """`retry:` of a step; unset keys take the documented defaults."""

    max_attempts: Count = 3
    backoff: Duration = timedelta(seconds=10)
    max_backoff: Duration = timedelta(minutes=5)
    non_retryable_exit_codes: list[Annotated[int, Field(ge=0, le=255)]] = []
    deadline: Duration | None = None

    @model_validator(mode="after")
    def _ordered(self) -> RetryModel:
        if self.max_backoff < self.backoff:
            raise ValueError(
                f"max_backoff ({format_duration(self.max_backoff)}) is shorter than "
                f"backoff ({format_duration(self.backoff)})"
            )
        return self


class HttpModel(_Model):
    """`http:` of a step."""

    nullable = frozenset({"body", "expect_status"})

    url: Url
    method: HttpMethod = "GET"
    headers: dict[str, Text] = Field(default_factory=dict)
    body: Any = None
    expect_status: list[Status] | None = None
    timeout: Duration | None = None


class WaitSignalModel(_Model):
    """`wait_signal:` of a step."""

    name: NonEmpty
    timeout: Duration | None = None


class SecretModel(_Model):
    """One value of a step's `secrets:`: a file, or a systemd credential."""

    file: NonEmpty | None = None
    credential: NonEmpty | None = None

    @model_validator(mode="after")
    def _one_source(self) -> SecretModel:
        if (self.file is None) == (self.credential is None):
            raise ValueError("a secret is read from one of: file, credential")
        return self


class StepModel(_Model):
    """One item of a flow's `steps:`; which keys go together is checked by the caller."""

    id: Id | None = None
    run: Argv | None = None
    http: HttpModel | None = None
    python: Ref | None = None
    sleep: Duration | None = None
    wait_signal: WaitSignalModel | None = None
    timeout: Duration | None = None
    retry: RetryModel | None = None
    env: dict[EnvName, Text] | None = None
    env_inherit: list[InheritedName] | None = None
    secrets: dict[EnvName, SecretModel] | None = None
    cwd: NonEmpty | None = None
    idempotent: bool | None = None
    needs: list[Id] | None = None


class FlowModel(_Model):
    """One value of `flows:`: `steps` (validated one by one) or `python`."""

    steps: list[Any] | None = None
    max_parallel: Annotated[int, Field(ge=1, le=1000)] | None = None
    fail_fast: bool | None = None
    python: Ref | None = None
    version: Annotated[str, StringConstraints(min_length=1, max_length=64)] | None = None
    pool: Id | None = None


class DocumentModel(_Model):
    """The top level; sections are validated item by item by the caller."""

    nullable = frozenset(
        {"version", "defaults", "flows", "triggers", "alerts", "calendars", "pools"}
    )

    version: Any = None
    alerts: AlertsModel | None = None
    defaults: Any = None
    calendars: dict[Any, Any] | None = None
    pools: dict[Any, Any] | None = None
    flows: dict[Any, Any] | None = None
    triggers: list[Any] | None = None
