"""Which adapters each LoRA engine pod serves, marked on the pod itself: a pod condition
(ADAPTERS_MARK) whose message lists the adapters loaded in its engine, for whatever routes a
request by its `model` to the engines that hold it (docs/router.md, "Adapters").

Why a pod condition and not a label or an annotation: the operator already patches pods/status
(the readiness gates) and needs no `patch` on pods, which would let it change a running pod's
image; whoever reads the mark reads pods already (the router's Role: get, list, watch).

The mark never claims more than the engine holds: an adapter about to be unloaded (removed from
spec.adapters, or its source changed) leaves the mark before the unload call (`withdrawn`), and one
that failed, or an engine that restarted (it has lost its adapters), or a pod whose engine no
longer answers, carries none. Marks are written only where they change, so an idle resync writes
nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from llmfleet import metrics_reconcile
from llmfleet.render.names import ADAPTERS_MARK

from .adapters import EngineOutcome

log = logging.getLogger(__name__)

SERVING = "AdaptersServing"
SERVING_NONE = "NoAdapterServing"


def marked(pod: Mapping[str, Any]) -> frozenset[str] | None:
    """The adapters the pod's mark names; None when it carries no mark."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == ADAPTERS_MARK:
            message = str(c.get("message") or "")
            return frozenset(n for n in message.split(",") if n)
    return None


def mark_condition(serving: Iterable[str]) -> dict[str, str]:
    """The pod condition that marks `serving` (adapter names: no comma, by their pattern)."""
    names = sorted(set(serving))
    return {
        "type": ADAPTERS_MARK,
        "status": "True" if names else "False",
        "reason": SERVING if names else SERVING_NONE,
        "message": ",".join(names),
    }


def current_marks(pods: Iterable[Mapping[str, Any]]) -> dict[str, frozenset[str] | None]:
    """Pod name -> what its mark names (None: it carries none)."""
    return {str(p["metadata"]["name"]): marked(p) for p in pods}


def serving(outcomes: Iterable[EngineOutcome]) -> dict[str, frozenset[str]]:
    """Pod name -> the adapters its engine holds, for each engine that answered the sync."""
    return {o.pod: o.loaded for o in outcomes if o.complete or o.loaded or o.failed}


def marks_to_write(
    marks: Mapping[str, frozenset[str] | None], serving: Mapping[str, frozenset[str]]
) -> dict[str, frozenset[str]]:
    """Pod name -> the adapters its mark must name, for each pod whose mark (`marks`) says
    otherwise. `serving`: what each engine that answered holds. A pod not in it (its engine does
    not answer, or it is being deleted) whose mark names adapters has it emptied; a pod in it that
    carries no mark yet gets one, empty or not."""
    out: dict[str, frozenset[str]] = {}
    for pod in sorted(marks.keys() | serving.keys()):
        now, want = marks.get(pod), serving.get(pod)
        if want is None:
            if now:
                out[pod] = frozenset()
        elif want != now:
            out[pod] = want
    return out


def withdrawn(
    marks: Mapping[str, frozenset[str] | None], staying: Mapping[str, frozenset[str]]
) -> dict[str, frozenset[str]]:
    """Before a sync: pod name -> its mark less what is about to leave the engine, for each pod
    whose mark names an adapter not in `staying` (what each engine holds that the spec still wants
    from the same source; a pod absent from it: nothing known to stay, e.g. it restarted)."""
    out: dict[str, frozenset[str]] = {}
    for pod, now in sorted(marks.items()):
        if not now:
            continue
        keep = now & staying.get(pod, frozenset())
        if keep != now:
            out[pod] = keep
    return out


def write_marks(core: k8s.CoreV1Api, namespace: str, marks: Mapping[str, frozenset[str]]) -> None:
    for pod, serving in sorted(marks.items()):
        body = {"status": {"conditions": [mark_condition(serving)]}}
        try:
            core.patch_namespaced_pod_status(pod, namespace, body)
            metrics_reconcile.count_write("patch", "Pod/status")
        except ApiException as e:
            if e.status != 404:  # a pod that is gone serves nothing
                raise
            log.debug("pod %s/%s is gone: no adapters mark", namespace, pod)
