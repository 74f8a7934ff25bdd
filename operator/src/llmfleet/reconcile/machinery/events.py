"""Kubernetes Events on the resources the operator reconciles, for decisions and failures only
(never on a no-op)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kubernetes import client as k8s

from llmfleet import FIELD_MANAGER, metrics_reconcile

from .conditions import now

log = logging.getLogger(__name__)
COMPONENT = FIELD_MANAGER


class EventRecorder:
    def __init__(self, api: k8s.ApiClient) -> None:
        self._core = k8s.CoreV1Api(api)

    def emit(self, body: dict[str, Any], etype: str, reason: str, message: str) -> None:
        meta = body["metadata"]
        stamp = now().strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:12]}",
                "namespace": meta["namespace"],
            },
            "involvedObject": {
                "apiVersion": body["apiVersion"],
                "kind": body["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
                "resourceVersion": meta.get("resourceVersion"),
            },
            "type": etype,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self._core.create_namespaced_event(meta["namespace"], event)
        except k8s.ApiException as e:  # an Event is worth less than the reconcile that made it
            log.warning("could not post event %s on %s: %s", reason, meta["name"], e.reason)
            return
        metrics_reconcile.count_write("create", "Event")

    def said_about(self, namespace: str, uid: str, reason: str) -> list[str]:
        """The messages of the Events `reason` on the object `uid` (the kubelet's FailedMount on
        a pod), newest last; none when they cannot be read. Made for a pod that waits for its
        volumes: what the kubelet says about them is in no status."""
        items = sorted(
            self._events(namespace, uid, reason),
            key=lambda e: str(e.last_timestamp or e.event_time or e.metadata.name),
        )
        return [str(e.message or "") for e in items]

    def _events(self, namespace: str, uid: str, reason: str) -> list[Any]:
        """The Events `reason` on the object `uid`; none when they cannot be read."""
        try:
            found = self._core.list_namespaced_event(
                namespace,
                field_selector=f"involvedObject.uid={uid},reason={reason}",
                _request_timeout=10,
            )
        except k8s.ApiException as e:
            log.warning("could not read %s events in %s: %s", reason, namespace, e.reason)
            return []
        return list(found.items)

    def related(self, namespace: str, uid: str, reason: str) -> list[dict[str, Any]]:
        """The Events `reason` on the object `uid`, each as its message and the object it names
        as related (`{"namespace", "name"}`, empty when it names none); none when they cannot be
        read. Made for the scheduler's Preempted Event, the only place that names a preemptor."""
        return [
            {
                "message": event.message,
                "related": {"namespace": event.related.namespace, "name": event.related.name}
                if event.related is not None
                else {},
            }
            for event in self._events(namespace, uid, reason)
        ]

    def namespace_terminating(self, namespace: str) -> bool:
        """Whether `namespace` is being deleted. Asked with a dry-run Event, which the API
        server refuses with the cause NamespaceTerminating: the operator may create Events
        wherever it works, while reading a Namespace would take a cluster-scoped grant."""
        probe = {
            "metadata": {
                "name": f"llmfleet-probe.{uuid.uuid4().hex[:12]}",
                "namespace": namespace,
            },
            "involvedObject": {"kind": "Namespace", "name": namespace},
            "reason": "Probe",
            "message": "dry run",
            "type": "Normal",
        }
        try:
            self._core.create_namespaced_event(namespace, probe, dry_run="All")
        except k8s.ApiException as e:
            return e.status == 403 and "NamespaceTerminating" in str(e.body or "")
        return False
