"""What the autoscalers (the HPA, KEDA's ScaledObject) say of themselves: why one cannot
scale, and the ScaledToZero condition."""

from __future__ import annotations

from typing import Any

from llmfleet.models.status import Condition
from llmfleet.reconcile.machinery.conditions import FALSE, TRUE, UNKNOWN, condition
from llmfleet.reconcile.machinery.object_fields import condition_status, int_field
from llmfleet.render.autoscaling import QUEUE_METRIC

from . import reasons as r


def hpa_blind(hpa: dict[str, Any] | None) -> str | None:
    """Why the HPA cannot scale on the queue metric, or None when it can (or is not there)."""
    for c in ((hpa or {}).get("status") or {}).get("conditions") or []:
        # ScalingDisabled: the target is at zero replicas (scaled to zero by KEDA), by design.
        if (
            c.get("type") == "ScalingActive"
            and c.get("status") == FALSE
            and c.get("reason") != "ScalingDisabled"
        ):
            return (
                f"the HorizontalPodAutoscaler cannot scale ({c.get('reason')}): "
                f"{c.get('message', '')}; is prometheus-adapter serving {QUEUE_METRIC}?"
            )
    return None


def scaler_blind(scaled_object: dict[str, Any] | None) -> str | None:
    """Why KEDA cannot scale the engines (to zero and back), or None."""
    for c in ((scaled_object or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready" and c.get("status") == FALSE:
            return (
                f"KEDA's ScaledObject is not Ready ({c.get('reason')}): {c.get('message', '')}; "
                "can KEDA reach the Prometheus of --keda-prometheus-url?"
            )
    return None


def scaled_to_zero(
    scaled_object: dict[str, Any], desired: int, current: int, ready: int, generation: int
) -> Condition:
    """ScaledToZero, for an LLMDeployment with autoscaling.minReplicas 0: True while it has no
    engine pod (and holds no GPU)."""
    idle = int_field(scaled_object, "spec", "cooldownPeriod")
    if condition_status(scaled_object, "Ready") == FALSE:
        message = next(
            (
                str(c.get("message", ""))
                for c in (scaled_object.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready"
            ),
            "",
        )
        return condition(
            r.SCALED_TO_ZERO,
            UNKNOWN,
            r.SCALER_NOT_READY,
            f"KEDA cannot scale: {message}",
            generation,
        )
    if desired == 0 and current == 0:
        since = (scaled_object.get("status") or {}).get("lastActiveTime")
        last = f" since {since}" if since else ""
        return condition(
            r.SCALED_TO_ZERO,
            TRUE,
            r.IDLE,
            f"no request{last} for {idle} s: 0 engine pods, 0 GPUs; the next request starts one",
            generation,
        )
    if ready == 0:
        return condition(
            r.SCALED_TO_ZERO,
            FALSE,
            r.WAKING,
            f"a request arrived: {desired} engine pod(s) starting; the router holds requests "
            "until one is ready",
            generation,
        )
    return condition(
        r.SCALED_TO_ZERO,
        FALSE,
        r.SERVING,
        f"{ready} engine pod(s) serving; scales to zero after {idle} s without a request",
        generation,
    )
