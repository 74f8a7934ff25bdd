"""Whether the API server's discovery lists an API group, in each form clients read it: what "the
API is installed" and "the API is gone" mean to a client, so that the cluster's install and
removal steps can return only once that is true.

Removing a CRD is not over when `kubectl delete --wait` returns (the CRD object is gone from
etcd). The API server then forgets the group in steps of its own, each a controller with an
informer and a work queue: the CRD registration controller stops wanting the APIService
`<version>.<group>` it made for the CRD and the autoregister controller deletes that APIService
(legacy discovery, /apis as an APIGroupList, lists every APIService the aggregator's informer
holds); the apiextensions discovery controller unsets the group's /apis/<group> handler and
removes it from the aggregated discovery document (/apis as an APIGroupDiscoveryList, what
kubectl and client-go read). Installing runs the same steps the other way. A client that asks
between the steps still sees the group.
"""

from __future__ import annotations

import json
import time
import urllib.error
from collections.abc import Callable, Iterable

# /apis as an APIGroupList: the Python client's ApisApi, client-go before aggregated discovery.
LEGACY = "application/json"
# /apis as an APIGroupDiscoveryList (aggregated discovery, GA in Kubernetes 1.30): kubectl,
# client-go.
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

# (path, Accept) -> the body; urllib.error.HTTPError for a status other than 2xx.
Get = Callable[[str, str], bytes]


def listed(get: Get, group: str) -> dict[str, bool]:
    """Whether each discovery endpoint lists `group`: /apis in both forms and /apis/<group>."""
    legacy = json.loads(get("/apis", LEGACY))
    aggregated = json.loads(get("/apis", AGGREGATED))
    if aggregated.get("kind") != "APIGroupDiscoveryList":
        raise RuntimeError(f"/apis answered {aggregated.get('kind')} to {AGGREGATED}")
    try:
        get(f"/apis/{group}", LEGACY)
        own = True
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        own = False
    return {
        "/apis (APIGroupList)": group in {g["name"] for g in legacy.get("groups") or []},
        "/apis (APIGroupDiscoveryList)": group
        in {i["metadata"]["name"] for i in aggregated.get("items") or []},
        f"/apis/{group}": own,
    }


def wait(get: Get, groups: Iterable[str], served: bool, timeout: float = 60) -> None:
    """Wait until every endpoint lists each of `groups` (served) or none lists any (not served);
    TimeoutError naming the endpoints that still disagree."""
    deadline = time.monotonic() + timeout
    wanted = list(groups)
    while True:
        wrong = [
            f"{where} {'lacks' if served else 'lists'} {group}"
            for group in wanted
            for where, has in listed(get, group).items()
            if has != served
        ]
        if not wrong:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"discovery not updated after {timeout:.0f}s: {'; '.join(wrong)}")
        time.sleep(0.1)
