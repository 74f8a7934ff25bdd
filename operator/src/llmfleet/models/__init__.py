"""The LLMFleet API: the pydantic models that define the CRDs, and the generator that turns
them into CustomResourceDefinitions (crd.py, resources.py). The built-in model catalog, GPU
profiles and the Hub client that build on these types are in llmfleet.catalog.

Nothing here talks to Kubernetes or does I/O.
"""

from llmfleet.models.autoscaling import AutoscalingSpec
from llmfleet.models.batchjob import (
    DEFAULT_BATCH_IMAGE,
    BatchInput,
    BatchOutput,
    ClaimPath,
    ConfigMapKey,
    LLMBatchJobSpec,
    SamplingDefaults,
)
from llmfleet.models.batchjob_status import LLMBatchJobStatus, ShardStatus
from llmfleet.models.defaults import DEFAULT_ENGINE_IMAGE
from llmfleet.models.deployment import KIND, LLMDeploymentSpec, Objective, Strategy
from llmfleet.models.engine import ContainerResources, EngineSpec
from llmfleet.models.errors import FieldProblem, describe_validation_error, field_problems
from llmfleet.models.gpus import GpuSpec
from llmfleet.models.model_spec import Dtype, ModelArchitecture, ModelSpec, Quantization
from llmfleet.models.refs import SecretKeyRef, VolumeClaimRef
from llmfleet.models.status import Condition, LLMDeploymentStatus, PlanSummary

__all__ = [
    "DEFAULT_BATCH_IMAGE",
    "DEFAULT_ENGINE_IMAGE",
    "KIND",
    "AutoscalingSpec",
    "BatchInput",
    "BatchOutput",
    "ClaimPath",
    "Condition",
    "ConfigMapKey",
    "ContainerResources",
    "Dtype",
    "EngineSpec",
    "FieldProblem",
    "GpuSpec",
    "LLMBatchJobSpec",
    "LLMBatchJobStatus",
    "LLMDeploymentSpec",
    "LLMDeploymentStatus",
    "ModelArchitecture",
    "ModelSpec",
    "Objective",
    "PlanSummary",
    "Quantization",
    "SamplingDefaults",
    "SecretKeyRef",
    "ShardStatus",
    "Strategy",
    "VolumeClaimRef",
    "describe_validation_error",
    "field_problems",
]
