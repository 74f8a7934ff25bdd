"""The words an LLMDeployment's status and Events are read by: each condition type and each
reason it can carry, named once. Users and their tools match on these strings (`kubectl wait
--for=condition=...`, alerts on a reason), so a change here is a change of the API."""

from __future__ import annotations

from llmfleet.reconcile.machinery import causes, conditions

# Condition types.
PLANNED = "Planned"
AVAILABLE = "Available"
PROGRESSING = "Progressing"
DEGRADED = conditions.DEGRADED  # every kind's refusals write it too
SCALING_LIMITED = "ScalingLimited"
PLAN_VERIFIED = "PlanVerified"
SCALED_TO_ZERO = "ScaledToZero"
ADAPTERS_READY = "AdaptersReady"

# Planned (besides the planner's own refusals, PlanError.reason).
LAYOUT_PLANNED = "LayoutPlanned"
LWS_MISSING = "LeaderWorkerSetMissing"
KEDA_MISSING = "KEDAMissing"
KEDA_PROMETHEUS_UNSET = "KEDAPrometheusUnset"
LORA_ENDPOINTS_UNFENCED = "LoRAEndpointsUnfenced"

# Available.
ROUTER_NOT_READY = "RouterNotReady"
IDLE_AT_ZERO = "ScaledToZero"
ENGINES_READY = "EnginesReady"
NO_ENGINE_READY = "NoEngineReady"

# Progressing.
LAYOUT_TRANSITION = "LayoutTransition"
ROLLING_OUT = "RollingOut"
# No GPU is free for a new pod: the pods that serve nothing go first (stuck_rollout.py). Also
# the reason of the Normal Event that says so once.
REPLACING_UNSERVING_PODS = "ReplacingUnservingPods"
# No GPU is free for a new pod and every old pod serves: 2 or more are replaced one at a time in
# place; with fewer the rollout waits for a GPU (full_pool_roll.py). Each also an Event's reason.
ROLLING_ONE_AT_A_TIME = "RollingOneAtATime"
WAITING_FOR_GPUS_TO_ROLL = "WaitingForGPUsToRoll"
# The Progressing reasons a Normal Event says once, when they begin.
ANNOUNCED = (REPLACING_UNSERVING_PODS, ROLLING_ONE_AT_A_TIME, WAITING_FOR_GPUS_TO_ROLL)
STABLE = "Stable"

# ScalingLimited.
# The same words a pod's blocker carries in Degraded (machinery/causes.py).
INSUFFICIENT_GPUS = causes.INSUFFICIENT_GPUS
UNSCHEDULABLE = causes.UNSCHEDULABLE
SCHEDULABLE = "Schedulable"

# Degraded (besides a blocker's own reason, machinery/causes.py).
PODS_UNSCHEDULABLE = "PodsUnschedulable"
ENGINE_STALLED = "EngineStalled"
ENGINE_CRASH_LOOP = "EngineCrashLoop"
AUTOSCALER_BLIND = "AutoscalerBlind"
AS_PLANNED = "AsPlanned"

# ScaledToZero.
SCALER_NOT_READY = "ScalerNotReady"
IDLE = "Idle"
WAKING = "Waking"
SERVING = "Serving"

# PlanVerified.
NO_ENGINE_REPORTED = "NoEngineReported"
KV_CACHE_MATCHES_PLAN = "KVCacheMatchesPlan"
KV_CACHE_DIFFERS_FROM_PLAN = "KVCacheDiffersFromPlan"

# AdaptersReady (besides the API key's, machinery/references.py's API_KEY_STEM + why).
ADAPTER_LOAD_FAILED = "AdapterLoadFailed"
NO_ENGINE = "NoEngine"
ADAPTERS_LOADING = "AdaptersLoading"
ADAPTERS_LOADED = "AdaptersLoaded"

# Events (reasons of their own; a Warning for a condition carries the condition's reason).
PLANNED_EVENT = "Planned"
APPLIED_EVENT = "Applied"
PLAN_NOT_VERIFIED_EVENT = "PlanNotVerified"
ENGINE_STALLED_EVENT = ENGINE_STALLED
ENGINE_RESTARTED_EVENT = "EngineRestarted"
ENDPOINT_WEAKENED_EVENT = "EndpointWeakened"
STANDBY_WOKEN_EVENT = "StandbyWoken"
STANDBY_SLEPT_EVENT = "StandbySlept"
STANDBY_CALL_FAILED_EVENT = "StandbyCallFailed"
