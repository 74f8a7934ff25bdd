"""A multi-node layout's engines: one LeaderWorkerSet (sigs.k8s.io/lws), each of whose groups is
one replica of `pipeline_parallel_size` pods, one per node, `tensor_parallel_size` GPUs each.

The pods start vLLM's own multi-node launcher (the `mp` executor: `--nnodes`, `--node-rank`,
`--master-addr`, `--master-port`, and `vllm serve --headless` on the workers), not Ray: nothing
to start before vLLM, one process tree per pod, and the leader serves the API as a single-node
engine does. LeaderWorkerSet's pod webhook gives every pod of a group the leader's address
(LWS_LEADER_ADDRESS) and its own index in the group (LWS_WORKER_INDEX); Kubernetes expands
`$(VAR)` in the arguments from them. A group restarts as a whole when one of its pods does
(RecreateGroupOnPodRestart): a pipeline with a stage gone cannot serve.

Only leaders serve: they carry the engine component label that the engine Service, the vLLM
Router, the HPA's queue metric and the PodMonitor select; workers carry COMPONENT_ENGINE_WORKER.
"""

from __future__ import annotations

from typing import Any

from llmfleet.models import LLMDeploymentSpec
from llmfleet.planner import Plan
from llmfleet.render.engine import engine_pod_template
from llmfleet.render.fleet_defaults import FleetDefaults
from llmfleet.render.names import (
    LAYOUT_LABEL,
    Owner,
    engine_deployment_name,
    layout_id,
    metadata,
)

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
DEPLOYMENT = ("apps/v1", "Deployment")
# What runs a layout's engines: a Deployment, or a LeaderWorkerSet for a multi-node layout.
ENGINE_KINDS = (DEPLOYMENT, (LWS_API_VERSION, LWS_KIND))
# Injected into every pod of a group by LeaderWorkerSet's pod webhook.
LEADER_ADDRESS_ENV = "LWS_LEADER_ADDRESS"
WORKER_INDEX_ENV = "LWS_WORKER_INDEX"
# torch.distributed's rendezvous on the leader (vLLM's --master-port).
MASTER_PORT = 29500


def engine_kind(plan: Plan) -> tuple[str, str]:
    """(apiVersion, kind) of the object that runs this layout's engines."""
    return (LWS_API_VERSION, LWS_KIND) if plan.pipeline_parallel_size > 1 else DEPLOYMENT


def launcher_args(plan: Plan, node_rank: str) -> tuple[str, ...]:
    return (
        "--nnodes",
        str(plan.pipeline_parallel_size),
        "--node-rank",
        node_rank,
        "--master-addr",
        f"$({LEADER_ADDRESS_ENV})",
        "--master-port",
        str(MASTER_PORT),
    )


def render_leaderworkerset(
    owner: Owner,
    spec: LLMDeploymentSpec,
    plan: Plan,
    fleet: FleetDefaults,
) -> dict[str, Any]:
    # A multi-node replica runs no adapter fetcher (render/fetcher.py says why), whatever
    # `fleet.fetcher_image` says.
    leader = engine_pod_template(owner, spec, plan, fleet, launcher_args=launcher_args(plan, "0"))
    worker = engine_pod_template(
        owner,
        spec,
        plan,
        fleet,
        launcher_args=(*launcher_args(plan, f"$({WORKER_INDEX_ENV})"), "--headless"),
        worker=True,
    )
    lws_spec: dict[str, Any] = {
        "leaderWorkerTemplate": {
            "size": plan.pipeline_parallel_size,
            "restartPolicy": "RecreateGroupOnPodRestart",
            "leaderTemplate": leader,
            "workerTemplate": worker,
        },
        # Workers start with their leader, which waits for them to join before it loads.
        "startupPolicy": "LeaderCreated",
        # As the Deployment: never below the serving capacity; a new group needs free nodes.
        "rolloutStrategy": {
            "type": "RollingUpdate",
            "rollingUpdateConfiguration": {"maxUnavailable": 0, "maxSurge": 1},
        },
    }
    if not spec.autoscaling.enabled:
        lws_spec["replicas"] = plan.replicas
    meta = metadata(owner, engine_deployment_name(owner.name, plan))
    meta["labels"] = {**meta["labels"], LAYOUT_LABEL: layout_id(plan)}
    return {"apiVersion": LWS_API_VERSION, "kind": LWS_KIND, "metadata": meta, "spec": lws_spec}
