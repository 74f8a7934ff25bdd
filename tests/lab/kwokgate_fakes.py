"""A stand-in for the API the kwok gate writes through, shared by the lab's gate tests."""

from __future__ import annotations

from typing import Any


class FakeCore:
    """What the kwok gate writes through the API, recorded."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.admitted: list[str] = []

    def create_namespaced_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.events.append(body)

    def patch_namespaced_pod_status(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.statuses.append(body["status"])

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.admitted.append(name)
