"""vLLM's runtime LoRA API as a fake, and the LoRA engine pods the adapter sync reads: shared by
the unit tests of reconcile/llmdeployment/adapters.py and of what builds on it."""

from __future__ import annotations

from typing import Any

from llmfleet.reconcile.llmdeployment.adapters import Endpoint
from llmfleet.render.names import ADAPTERS_GATE


class FakeEngines:
    """vLLM's API per IP: what is loaded, which sources fail, and every call made."""

    def __init__(self, refuse: dict[str, str] | None = None) -> None:
        self.loaded: dict[str, dict[str, str]] = {}
        self.refuse = refuse or {}
        self.calls: list[tuple[str, str, str]] = []
        self.down: set[str] = set()

    def adapters(self, at: Endpoint) -> dict[str, str] | str | None:
        self.calls.append(("list", at.ip, ""))
        return None if at.ip in self.down else dict(self.loaded.setdefault(at.ip, {}))

    def load(self, at: Endpoint, name: str, source: str) -> str | None:
        self.calls.append(("load", at.ip, name))
        if source in self.refuse:
            return self.refuse[source]
        self.loaded.setdefault(at.ip, {})[name] = source
        return None

    def unload(self, at: Endpoint, name: str) -> str | None:
        self.calls.append(("unload", at.ip, name))
        self.loaded.setdefault(at.ip, {}).pop(name, None)
        return None


def pod(name: str, ip: str, restarts: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {
            "containers": [{"name": "vllm", "args": ["--model", "m", "--enable-lora"]}],
            "readinessGates": [{"conditionType": ADAPTERS_GATE}],
        },
        "status": {
            "podIP": ip,
            "conditions": [{"type": "ContainersReady", "status": "True"}],
            "containerStatuses": [{"name": "vllm", "restartCount": restarts}],
        },
    } | extra
