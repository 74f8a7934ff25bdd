"""The objects each kind's spec names, by field: what a missing object is attributed to."""

from __future__ import annotations

from llmfleet.models import LLMDeploymentSpec
from llmfleet.models.batchjob import LLMBatchJobSpec
from llmfleet.models.gpus import GpuSpec
from llmfleet.models.model_spec import ModelSpec
from llmfleet.planner import Plan
from llmfleet.render.batchjob import CONTAINER as BATCH_CONTAINER
from llmfleet.render.fetcher import runs_fetcher
from llmfleet.render.names import ENGINE_CONTAINER

from .causes import CLAIM, CONFIGMAP, IMAGE, NODES, RESOURCES, SECRET, TAINTS, Reference

# The engines' API key, which the operator also reads itself for their LoRA API: what it says
# when it cannot shares these words with what the kubelet's refusal is attributed to.
API_KEY_FIELD = "spec.engine.apiKeySecretRef"
API_KEY_STEM = "APIKeySecret"


def _model(model: ModelSpec) -> list[Reference]:
    out = []
    if model.cache is not None:
        out.append(
            Reference(
                "spec.model.cache.claimName", CLAIM, model.cache.claim_name, "ModelCacheClaim"
            )
        )
    if model.token_secret_ref is not None:
        ref = model.token_secret_ref
        out.append(Reference("spec.model.tokenSecretRef", SECRET, ref.name, "TokenSecret", ref.key))
    return out


def _nodes(gpus: GpuSpec | None, plan: Plan) -> list[Reference]:
    """The nodeSelector the plan gives the pods, attributed to the field that chose it, and the
    tolerations, which only a GPU profile gives."""
    # Taints no toleration matches: the profile is where the pods' tolerations come from.
    out = [Reference("spec.gpus.profile", TAINTS, "", "GPUProfile")]
    if not plan.node_selector:
        return out
    if gpus is not None and gpus.product:
        field = "spec.gpus.product"
    elif gpus is not None and gpus.profile:
        field = "spec.gpus.profile"
    else:
        field = "spec.gpus"
    selector = ",".join(f"{k}={v}" for k, v in sorted(plan.node_selector.items()))
    return [*out, Reference(field, NODES, selector, "GPUProduct")]


def deployment_references(spec: LLMDeploymentSpec, plan: Plan) -> list[Reference]:
    out = _model(spec.model)
    if spec.engine.api_key_secret_ref is not None:
        ref = spec.engine.api_key_secret_ref
        out.append(Reference(API_KEY_FIELD, SECRET, ref.name, API_KEY_STEM, ref.key))
    if spec.engine.lora is not None and spec.engine.lora.claim is not None:
        claim = spec.engine.lora.claim.claim_name
        out.append(Reference("spec.engine.lora.claim.claimName", CLAIM, claim, "AdapterClaim"))
    store = spec.engine.lora.object_store if spec.engine.lora is not None else None
    if store is not None and store.secret_ref is not None and runs_fetcher(plan):
        # The adapter fetcher's envFrom: its pods wait for the Secret as for any other.
        field = "spec.engine.lora.objectStore.secretRef"
        out.append(Reference(field, SECRET, store.secret_ref, "AdapterStoreSecret"))
    out.append(Reference("spec.engine.image", IMAGE, ENGINE_CONTAINER, "EngineImage"))
    out.append(Reference("spec.engine.resources", RESOURCES, ENGINE_CONTAINER, "EngineResources"))
    out.append(Reference("spec.router.image", IMAGE, "router", "RouterImage"))
    return out + _nodes(spec.gpus, plan)


def batch_references(spec: LLMBatchJobSpec, plan: Plan) -> list[Reference]:
    out = _model(spec.model)
    if spec.input.config_map is not None:
        cm = spec.input.config_map
        out.append(Reference("spec.input.configMap", CONFIGMAP, cm.name, "InputConfigMap", cm.key))
    if spec.input.persistent_volume_claim is not None:
        claim = spec.input.persistent_volume_claim.claim_name
        out.append(Reference("spec.input.persistentVolumeClaim", CLAIM, claim, "InputClaim"))
    claim = spec.output.persistent_volume_claim.claim_name
    out.append(Reference("spec.output.persistentVolumeClaim", CLAIM, claim, "OutputClaim"))
    out.append(Reference("spec.engine.image", IMAGE, BATCH_CONTAINER, "EngineImage"))
    out.append(Reference("spec.engine.resources", RESOURCES, BATCH_CONTAINER, "EngineResources"))
    return out + _nodes(spec.gpus, plan)
