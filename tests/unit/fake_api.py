"""An in-memory API server as the operator's reconciles see it, for unit tests of a whole
reconcile: the dynamic client `Applier` builds (get, list, server-side apply, delete, status merge
patch) and Event creation. What the operator writes is recorded, status patches and Events as
sent, so a test can pin the JSON the API server receives.

`install(monkeypatch)` swaps it in; controllers built afterwards talk to it.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import NotFoundError

from llmfleet.reconcile import apply

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


def _pruned(value: Any) -> Any:
    """`value` without null members, at every depth, lists included: what the API server's
    merge patch (evanphx/json-patch) stores for a value that replaces, rather than merges."""
    if isinstance(value, dict):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return copy.deepcopy(value)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return _pruned(patch)
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class _Obj:
    def __init__(self, data: dict[str, Any]) -> None:
        self._data = copy.deepcopy(data)

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self._data)


class _List:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = [_Obj(i) for i in items]


def _matches(labels: dict[str, str], selector: str) -> bool:
    for term in filter(None, (selector or "").split(",")):
        k, _, v = term.partition("=")
        if labels.get(k) != v:
            return False
    return True


@dataclass
class FakeApi:
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    # (kind, name, patch body) of every status patch, in order.
    status_patches: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    # (type, reason, message) of every Event posted, in order.
    events: list[tuple[str, str, str]] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    # Kinds whose server-side apply the API server refuses, with what it says.
    refuse: dict[str, ApiException] = field(default_factory=dict)
    _uids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` as the API server would hold it (a uid added when missing)."""
        stored = copy.deepcopy(obj)
        meta = stored.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        meta.setdefault("creationTimestamp", "2026-01-01T00:00:00Z")
        self.objects[self.key(stored)] = stored
        return stored

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return self.objects[(api_version, kind, namespace, name)]

    @staticmethod
    def key(obj: dict[str, Any]) -> Key:
        meta = obj["metadata"]
        return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])

    @property
    def resources(self) -> _Discovery:
        return _Discovery(self)


@dataclass(frozen=True)
class _Discovery:
    api: FakeApi

    def get(self, *, api_version: str, kind: str) -> _Resource:
        return _Resource(self.api, api_version, kind)


class _Resource:
    def __init__(self, api: FakeApi, api_version: str, kind: str) -> None:
        self.api, self.api_version, self.kind = api, api_version, kind
        self.status = _Status(self)

    def get(
        self, name: str | None = None, namespace: str | None = None, label_selector: str = ""
    ) -> Any:
        if name is not None:
            found = self.api.objects.get((self.api_version, self.kind, namespace or "", name))
            if found is None:
                raise NotFoundError(ApiException(status=404, reason="Not Found"))
            return _Obj(found)
        return _List(
            [
                o
                for (v, k, ns, _), o in sorted(self.api.objects.items())
                if (v, k) == (self.api_version, self.kind)
                and (namespace is None or ns == namespace)
                and _matches(o["metadata"].get("labels") or {}, label_selector)
            ]
        )

    def server_side_apply(
        self, *, body: dict[str, Any], name: str, namespace: str, **_: Any
    ) -> Any:
        if self.kind in self.api.refuse:
            raise self.api.refuse[self.kind]
        key = (self.api_version, self.kind, namespace, name)
        live = self.api.objects.get(key)
        obj = copy.deepcopy(body)
        if live is not None:
            obj["metadata"] = {**live["metadata"], **obj["metadata"]}
            if "status" in live:
                obj["status"] = live["status"]
        self.api.applied.append(f"{self.kind}/{name}")
        return _Obj(self.api.put(obj))

    def delete(self, *, name: str, namespace: str, **_: Any) -> None:
        self.api.objects.pop((self.api_version, self.kind, namespace, name))
        self.api.deleted.append(f"{self.kind}/{name}")


class _Status:
    def __init__(self, resource: _Resource) -> None:
        self.resource = resource

    def patch(self, *, body: dict[str, Any], name: str, namespace: str, **_: Any) -> Any:
        r = self.resource
        key = (r.api_version, r.kind, namespace, name)
        r.api.status_patches.append((r.kind, name, copy.deepcopy(body)))
        obj = r.api.objects[key]
        obj["status"] = merge_patch(obj.get("status") or {}, body["status"])
        return _Obj(obj)


def install(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    """A fresh FakeApi that every controller built afterwards talks to."""
    api = FakeApi()
    monkeypatch.setattr(apply, "DynamicClient", lambda _client: api)

    def create_event(_self: Any, namespace: str, body: dict[str, Any], **_: Any) -> None:
        api.events.append((body["type"], body["reason"], body["message"]))

    monkeypatch.setattr(k8s.CoreV1Api, "create_namespaced_event", create_event)
    return api
