"""Server-side apply of rendered children with one field manager, and pruning of what is no
longer rendered. Children are read from the operator's watch-fed view (`cache.py`), so a
reconcile that changes nothing makes no request beyond reading its own object."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError

from llmfleet import FIELD_MANAGER, metrics_reconcile
from llmfleet.render.fleet import MANAGED_KINDS

from .cache import ChildView
from .drift import needs_apply, with_hash

log = logging.getLogger(__name__)
APPLY_PATCH = "application/apply-patch+yaml"


@dataclass
class ApplyResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0

    @property
    def writes(self) -> int:
        return len(self.created) + len(self.updated) + len(self.deleted)


# What YAML may not carry raw in a double-quoted scalar, though JSON may: C1 controls and DEL
# (refused: "control characters are not allowed"), the line breaks YAML 1.1 folds into spaces
# (NEL, LS, PS) and the BOM and non-characters. Their JSON escapes are valid YAML.
_RAW_IN_JSON_NOT_YAML = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff]")


def apply_body(obj: dict[str, Any]) -> bytes:
    """`obj` as a server-side apply body: JSON (which is YAML) in UTF-8. Not the client's own
    serialiser, which escapes text beyond the BMP (an emoji) as a JSON surrogate pair that the
    API server's YAML parser refuses ("invalid Unicode character escape code")."""
    text = json.dumps(obj, ensure_ascii=False)
    return _RAW_IN_JSON_NOT_YAML.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode()


def ref(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


class Applier:
    def __init__(self, api: k8s.ApiClient, view: ChildView) -> None:
        self._dyn = DynamicClient(api)
        self._resources: dict[tuple[str, str], Any] = {}
        self.view = view

    def resource(self, api_version: str, kind: str) -> Any:
        key = (api_version, kind)
        if key not in self._resources:
            self._resources[key] = self._dyn.resources.get(api_version=api_version, kind=kind)
        return self._resources[key]

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """The object as the API server has it now (a GET; children come from `self.view`)."""
        try:
            obj: dict[str, Any] = (
                self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
            )
            return obj
        except NotFoundError:
            return None

    def list(
        self, api_version: str, kind: str, namespace: str | None, selector: str
    ) -> list[dict[str, Any]]:
        """Objects matching `selector` in `namespace` (every namespace when None), listed now."""
        items = self.resource(api_version, kind).get(namespace=namespace, label_selector=selector)
        return [i.to_dict() for i in items.items]

    def apply(self, obj: dict[str, Any], result: ApplyResult) -> dict[str, Any]:
        """Apply `obj` unless the live object (in the view) already holds every rendered field."""
        desired = with_hash(obj)
        meta = desired["metadata"]
        live = self.view.get(
            desired["apiVersion"], desired["kind"], meta["namespace"], meta["name"]
        )
        if not needs_apply(desired, live):
            result.unchanged += 1
            assert live is not None
            return live
        resource = self.resource(desired["apiVersion"], desired["kind"])
        # With a charset in the content type the client sends the bytes it is given.
        response = self._dyn.request(
            "patch",
            resource.path(name=meta["name"], namespace=meta["namespace"]),
            body=apply_body(desired),
            content_type=f"{APPLY_PATCH}; charset=utf-8",
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            serialize=False,
        )
        applied: dict[str, Any] = json.loads(response.data)
        verb, done = ("create", result.created) if live is None else ("update", result.updated)
        done.append(ref(desired))
        metrics_reconcile.count_write(verb, desired["kind"])
        return applied

    def prune(
        self,
        *,
        namespace: str,
        owner_label: tuple[str, str],
        owner_uid: str,
        keep: Iterable[str],
        result: ApplyResult,
        hold: Iterable[str] = (),
    ) -> None:
        """Delete children of `owner_uid` (labelled `owner_label`) that were not rendered this
        time, except those in `hold` (kept on purpose, e.g. the old layout while the new one
        comes up)."""
        keep_set, hold_set = set(keep), set(hold)
        for api_version, kind in reversed(MANAGED_KINDS):
            for live in self.view.by_label(api_version, kind, namespace, *owner_label):
                r = ref(live)
                owners = live["metadata"].get("ownerReferences") or []
                if r in keep_set or r in hold_set or not any(o["uid"] == owner_uid for o in owners):
                    continue
                if self.delete(api_version, kind, namespace, live["metadata"]["name"]):
                    result.deleted.append(r)

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        """Delete a child, its own children in the background; False when it was already gone
        (the view had not yet heard)."""
        try:
            self.resource(api_version, kind).delete(
                name=name, namespace=namespace, body={"propagationPolicy": "Background"}
            )
        except NotFoundError:
            return False
        metrics_reconcile.count_write("delete", kind)
        return True
