"""What `describe` shows of the dependency graph: a trigger's upstreams and its
dependents, through `after:` (every form) and `requires:`."""

from __future__ import annotations

from datetime import timedelta

from tests.factories import spec
from triggers.clock import utc
from triggers.dependency_links import DependencyLink, dependent_links, upstream_links
from triggers.model import AfterSchedule, Requirement, Trigger, TriggerSpec, Upstream

T0 = utc(2027, 1, 1)
BOTH = AfterSchedule(
    upstreams=(Upstream(trigger="a"), Upstream(trigger="b", outcome="failed")),
    join="all",
    within=timedelta(hours=6),
)
SPECS = [
    spec("a"),
    spec("b"),
    spec("both", schedule=BOTH),
    spec("one", schedule=AfterSchedule.of("a", "settled")),
    spec(
        "needs",
        requires=Requirement(trigger="a", outcome="completed", since=timedelta(hours=12)),
    ),
]


def stored(trigger_spec: TriggerSpec, *, retired: bool = False) -> Trigger:
    return Trigger(
        spec=trigger_spec,
        revision=1,
        watermark_at=T0,
        created_at=T0,
        updated_at=T0,
        retired=retired,
    )


def test_a_dependent_lists_each_upstream_with_its_form() -> None:
    assert [link.to_json() for link in upstream_links(SPECS[2])] == [
        {
            "trigger": "a",
            "via": "after",
            "outcome": "completed",
            "join": "all",
            "within_s": 21600.0,
        },
        {"trigger": "b", "via": "after", "outcome": "failed", "join": "all", "within_s": 21600.0},
    ]
    [required] = upstream_links(SPECS[4])
    assert required == DependencyLink(
        trigger_id="a", via="requires", outcome="completed", within=timedelta(hours=12)
    )
    assert upstream_links(SPECS[0]) == []


def test_an_upstream_lists_its_live_dependents_by_id() -> None:
    triggers = [stored(s) for s in SPECS] + [
        stored(spec("gone", schedule=AfterSchedule.of("a")), retired=True)
    ]

    found = dependent_links("a", triggers)

    assert [(link.trigger_id, link.via, link.join) for link in found] == [
        ("both", "after", "all"),
        ("needs", "requires", None),
        ("one", "after", "one"),
    ]
    assert [link.text() for link in found] == [
        "both completed (after all, within 6h)",
        "needs completed (requires, within 12h)",
        "one settled (after)",
    ]
    assert [link.trigger_id for link in dependent_links("b", triggers)] == ["both"]
