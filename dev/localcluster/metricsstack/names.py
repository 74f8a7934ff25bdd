"""What every part of the metrics stack refers to by name: its namespace, the adapter's Service
(named by the APIServices and by the adapter's serving certificate) and the ports its components
listen on."""

from __future__ import annotations

from dataclasses import dataclass

NAMESPACE = "llmfleet-monitoring"
ADAPTER_SERVICE = "prometheus-adapter"


@dataclass(frozen=True)
class StackPorts:
    prometheus: int
    adapter: int
    ksm: int
    ksm_telemetry: int
