"""Two operator replicas and the leader's death, as the e2e test and `make bench` both run it:
who wrote what (from the API server's audit log, each replica known by its token), and how long
the standby took from the leader's SIGKILL to its first write."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .operator_process import Operator, credential, utcnow
from .waiting import wait_until


@dataclass(frozen=True)
class Failover:
    killed_at: datetime
    # The standby's first write of the Lease, and its first write of anything else.
    lease_taken_s: float
    first_write_s: float


def stamp(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))


def writers(events: list[dict[str, Any]], *replicas: Operator) -> dict[str, list[str]]:
    """Each replica's writes among `events` (name -> 'verb resource/name'), and anyone else's
    under the key '?'."""
    names = {r.credential_id: r.name for r in replicas}
    out: dict[str, list[str]] = {r.name: [] for r in replicas}
    for e in events:
        ref = e.get("objectRef") or {}
        what = f"{e['verb']} {ref.get('resource')}/{ref.get('name', '')}"
        out.setdefault(names.get(credential(e), "?"), []).append(what)
    return out


def kill_leader(
    leader: Operator,
    standby: Operator,
    during: Callable[[], None],
    first_write_in: str,
    timeout: float = 90,
) -> Failover:
    """SIGKILL `leader`, run `during` (changes the standby must reconcile), and wait for the
    standby's first write in namespace `first_write_in` that is not the Lease."""
    killed_at = utcnow()
    leader.kill()
    during()
    wait_until(standby.leading, timeout=timeout, what=f"{standby.name} leading")

    def first(leases: bool) -> datetime | None:
        mine = [
            e
            for e in leader.writes_since(killed_at, None if leases else first_write_in, leases=True)
            if credential(e) == standby.credential_id
            and ((e.get("objectRef") or {}).get("resource") == "leases") == leases
        ]
        return min((stamp(e) for e in mine), default=None)

    wrote = wait_until(lambda: first(False), timeout=timeout, what=f"{standby.name} writing")
    taken = first(True)
    assert taken is not None, f"{standby.name} leads without having written the Lease"
    return Failover(
        killed_at=killed_at,
        lease_taken_s=(taken - killed_at).total_seconds(),
        first_write_s=(wrote - killed_at).total_seconds(),
    )


def lease_holder(leader: Operator) -> str:
    """The holderIdentity of the installation's Lease ('' when released)."""
    args = dict(a.split("=", 1) for a in leader.chart_args if a.startswith("--leader-election-"))
    out = leader.cluster.kubectl(
        "get",
        "lease",
        args["--leader-election-id"],
        "-n",
        args["--leader-election-namespace"],
        "-o",
        "json",
    )
    holder: str = json.loads(out)["spec"].get("holderIdentity") or ""
    return holder
