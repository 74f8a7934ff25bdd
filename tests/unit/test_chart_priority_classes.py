"""The chart's priorityClasses: a spare class below every pod that never preempts, an online class
above it, the operator told their names by flags, and only `get` on the spare class by name."""

from __future__ import annotations

from typing import Any

import pytest
from chartrbac import granted, is_priority_class_rbac
from chartrender import of_kind, operator_container, refusal, render

from llmfleet.cli import build_parser
from llmfleet.commands.run import settings_from_args

RUN = ["run", "--leader-election-namespace=x"]


def classes(docs: list[dict[str, Any]]) -> dict[str, tuple[int, str]]:
    return {
        d["metadata"]["name"]: (d["value"], d["preemptionPolicy"])
        for d in of_kind(docs, "PriorityClass")
    }


def flags(docs: list[dict[str, Any]]) -> list[str]:
    return [a for a in operator_container(docs)["args"] if "priority-class" in a]


VALUES = {
    # --set values -> PriorityClasses (name: (value, preemptionPolicy)), the operator's flags
    "defaults": (
        (),
        {"llmfleet-spare": (-100, "Never"), "llmfleet-online": (1000, "PreemptLowerPriority")},
        ["--spare-priority-class=llmfleet-spare"],
    ),
    "online-class-on-the-engines": (
        ("priorityClasses.online.assignToEngines=true",),
        {"llmfleet-spare": (-100, "Never"), "llmfleet-online": (1000, "PreemptLowerPriority")},
        ["--spare-priority-class=llmfleet-spare", "--engine-priority-class=llmfleet-online"],
    ),
    "engines-above-a-positive-spare-class": (
        (
            "priorityClasses.online.assignToEngines=true",
            "priorityClasses.spare.value=10",
            "priorityClasses.online.value=20",
        ),
        {"llmfleet-spare": (10, "Never"), "llmfleet-online": (20, "PreemptLowerPriority")},
        ["--spare-priority-class=llmfleet-spare", "--engine-priority-class=llmfleet-online"],
    ),
    # docs/batch.md, "Under cluster-autoscaler": at its default cutoff (-10), not expendable,
    # still below the engines.
    "spare-work-cluster-autoscaler-scales-for": (
        ("priorityClasses.spare.name=llmfleet-spare-scaled", "priorityClasses.spare.value=-10"),
        {
            "llmfleet-spare-scaled": (-10, "Never"),
            "llmfleet-online": (1000, "PreemptLowerPriority"),
        },
        ["--spare-priority-class=llmfleet-spare-scaled"],
    ),
    "classes-made-elsewhere": (
        ("priorityClasses.create=false", "priorityClasses.spare.name=batch-low"),
        {},
        ["--spare-priority-class=batch-low"],
    ),
    "no-spare-class": (
        ("priorityClasses.spare.name=",),
        {"llmfleet-online": (1000, "PreemptLowerPriority")},
        [],
    ),
}


@pytest.mark.parametrize(("set_args", "expected", "passed"), VALUES.values(), ids=VALUES.keys())
def test_the_classes_render_and_the_operator_is_told_their_names(
    set_args: tuple[str, ...], expected: dict[str, tuple[int, str]], passed: list[str]
) -> None:
    docs = render(*set_args)
    assert classes(docs) == expected
    assert flags(docs) == passed
    assert all(d["globalDefault"] is False for d in of_kind(docs, "PriorityClass"))


def test_the_flags_the_chart_passes_reach_the_operators_configuration() -> None:
    passed = flags(render("priorityClasses.online.assignToEngines=true"))
    cfg = settings_from_args(build_parser().parse_args([*RUN, *passed]))
    assert (cfg.spare_priority_class, cfg.engine_priority_class) == (
        "llmfleet-spare",
        "llmfleet-online",
    )
    unset = settings_from_args(build_parser().parse_args(RUN))
    assert (unset.spare_priority_class, unset.engine_priority_class) == ("", "")


def test_the_operator_refuses_a_class_name_kubernetes_would_not_take(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args([*RUN, "--spare-priority-class=Spare_Class"])
    assert "--spare-priority-class: not a PriorityClass name: 'Spare_Class'" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "set_args",
    [
        pytest.param((), id="all-namespaces"),
        pytest.param(("watchNamespaces={team-a}",), id="listed-namespaces"),
    ],
)
def test_the_operator_may_get_the_spare_class_by_name_and_nothing_else(
    set_args: tuple[str, ...],
) -> None:
    docs = [d for d in render(*set_args) if is_priority_class_rbac(d)]
    (role,) = of_kind(docs, "ClusterRole")
    assert granted(role) == {("scheduling.k8s.io", "priorityclasses"): {"get"}}
    assert [r.get("resourceNames") for r in role["rules"]] == [["llmfleet-spare"]]
    (binding,) = of_kind(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["namespace"] == "llmfleet-system"
    assert not [d for d in render("priorityClasses.spare.name=") if is_priority_class_rbac(d)]


REFUSED = {
    "spare-not-below-the-engines-default-priority": (
        ("priorityClasses.spare.value=0",),
        ["priorityClasses.spare.value (0) must be below 0"],
    ),
    "spare-not-below-online": (
        (
            "priorityClasses.online.assignToEngines=true",
            "priorityClasses.spare.value=1000",
        ),
        ["priorityClasses.spare.value (1000) must be below priorityClasses.online.value (1000)"],
    ),
    "one-class-for-both": (
        ("priorityClasses.online.name=llmfleet-spare",),
        ["priorityClasses.spare.name and priorityClasses.online.name are both"],
    ),
    "engines-on-an-unnamed-class": (
        ("priorityClasses.online.assignToEngines=true", "priorityClasses.online.name="),
        ["priorityClasses.online.assignToEngines=true needs priorityClasses.online.name"],
    ),
    "a-kubernetes-reserved-name": (
        ("priorityClasses.spare.name=system-spare",),
        ["priorityClasses.spare.name", "system-"],
    ),
    "not-a-class-name": (
        ("priorityClasses.spare.name=Spare_Class",),
        ["/priorityClasses/spare/name"],
    ),
    "above-what-kubernetes-allows": (
        ("priorityClasses.online.value=2000000000",),
        ["/priorityClasses/online/value"],
    ),
    "typo": (("priorityClasses.spare.vaule=-5",), ["vaule", "/priorityClasses/spare"]),
}


@pytest.mark.parametrize(("set_args", "named"), REFUSED.values(), ids=REFUSED.keys())
def test_classes_that_would_not_let_online_serving_preempt_spare_work_are_refused(
    set_args: tuple[str, ...], named: list[str]
) -> None:
    said = refusal(*set_args)
    for word in named:
        assert word in said, said
