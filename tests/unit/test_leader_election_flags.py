"""`llmfleet run`'s leader election: on by default, its Lease where the chart says, each process
a holder identity of its own, and a setting that could let two replicas write refused at start,
naming the flags."""

from __future__ import annotations

import pytest

from llmfleet.cli import build_parser
from llmfleet.commands.run import settings_from_args
from llmfleet.operator_app import leader_election
from llmfleet.reconcile.machinery.leader import LeaderElectionConfig

CHART_ARGS = [
    "--leader-election-namespace=llmfleet-system",
    "--leader-election-id=llmfleet",
    "--lease-duration=15",
    "--renew-deadline=10",
    "--retry-period=2",
]


def election(*args: str) -> LeaderElectionConfig | None:
    return leader_election(settings_from_args(build_parser().parse_args(["run", *args])))


def test_the_charts_flags_campaign_for_the_releases_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAME", "llmfleet-6d9f-abcde")
    cfg = election(*CHART_ARGS)
    assert cfg is not None
    assert (cfg.namespace, cfg.name) == ("llmfleet-system", "llmfleet")
    assert (cfg.lease_duration, cfg.renew_deadline, cfg.retry_period) == (15, 10, 2)
    assert cfg.identity.startswith("llmfleet-6d9f-abcde_")


def test_a_restarted_process_never_takes_its_predecessors_lease_for_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAME", "llmfleet-6d9f-abcde")
    first, second = election(*CHART_ARGS), election(*CHART_ARGS)
    assert first is not None
    assert second is not None
    assert first.identity != second.identity


def test_the_pods_namespace_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "ops")
    cfg = election()
    assert cfg is not None
    assert (cfg.namespace, cfg.name) == ("ops", "llmfleet-operator")


def test_it_can_be_turned_off_for_a_single_process() -> None:
    assert election("--no-leader-election") is None


REFUSED = {
    "no-namespace-outside-a-pod": ((), ["--leader-election-namespace", "--no-leader-election"]),
    "renew-deadline-not-below-the-lease": (
        ("--leader-election-namespace=x", "--lease-duration=10", "--renew-deadline=10"),
        ["--lease-duration", "--renew-deadline", "lease duration > renew deadline"],
    ),
    "a-write-could-outlast-the-lease": (
        ("--leader-election-namespace=x", "--lease-duration=11", "--renew-deadline=10"),
        ["--lease-duration", "--renew-deadline", "renew deadline + retry period"],
    ),
    "retries-too-slow-to-renew-in-time": (
        ("--leader-election-namespace=x", "--renew-deadline=4", "--retry-period=4"),
        ["--retry-period", "1.2 x retry period"],
    ),
}


@pytest.mark.parametrize(("args", "named"), REFUSED.values(), ids=REFUSED.keys())
def test_settings_that_could_let_two_replicas_write_are_refused_naming_the_flags(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], named: list[str]
) -> None:
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    with pytest.raises(SystemExit) as refused:
        election(*args)
    for word in named:
        assert word in str(refused.value)
