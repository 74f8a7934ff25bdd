"""The weights a plan sizes: their format, where the planner learnt it, and the kernel vLLM runs
them with.

A checkpoint that declares a quantized format in config.json (`quantization_config`) is sized
from its layers as that format stores them (catalog/hfquant.py); vLLM reads the format itself, so
nothing is passed for it. `spec.model.quantization` then only has to agree: `none` (the default)
follows the checkpoint, the format's own name is accepted, anything else is refused naming both.
Without a config.json (the catalog, spec.model.architecture) the spec's value is taken as given
and sized from parametersBillions; `fp8` of a 16-bit checkpoint is quantized on load by vLLM
(--quantization fp8).
"""

from __future__ import annotations

from dataclasses import dataclass

from llmfleet.catalog.hfconfig import CheckpointWeights, ModelConfigError, checkpoint_weights
from llmfleet.catalog.hfquant import Kernel
from llmfleet.catalog.hub import Config, described
from llmfleet.models.deployment import LLMDeploymentSpec
from llmfleet.models.model_spec import Dtype, Quantization
from llmfleet.planner.errors import PlanError

QUANTIZATION_FIELD = "spec.model.quantization"
_ARCHITECTURE_FIELD = "spec.model.architecture"
_KERNELS: dict[Quantization, Kernel] = {
    "none": "w16a16",
    "fp8": "w8a8",
    "int8": "w8a8",
    "awq": "w4a16",
    "gptq": "w4a16",
}
_WORDS: dict[Quantization, str] = {
    "fp8": "fp8",
    "int8": "int8",
    "awq": "4-bit AWQ",
    "gptq": "4-bit GPTQ",
}


@dataclass(frozen=True)
class Weights:
    """The weights as vLLM will hold them."""

    quantization: Quantization  # what the planner sizes by when `checkpoint` is None
    kernel: Kernel
    words: str  # e.g. "fp8 weights, one scale per 128x128 block"
    source: str  # where the format came from
    online: bool = False  # vLLM quantizes a 16-bit checkpoint on load: --quantization fp8
    checkpoint: CheckpointWeights | None = None  # sized from config.json's layers

    @property
    def sixteen_bit(self) -> bool:
        return self.kernel == "w16a16"

    @property
    def triton_experts(self) -> bool:
        """MXFP4 experts, which vLLM runs on its TRITON MoE backend (catalog/mxfp4_triton.py)."""
        return self.checkpoint is not None and self.checkpoint.format.expert_layout is not None


def typed(dtype: Dtype, quantization: Quantization, source: str | None = None) -> Weights:
    """Weights as spec.model.quantization names them, sized from parametersBillions."""
    source = source or f"{QUANTIZATION_FIELD} {quantization}"
    words: str = _WORDS.get(quantization, "16-bit" if dtype == "auto" else dtype)
    return Weights(
        quantization, _KERNELS[quantization], words, source, online=quantization == "fp8"
    )


def as_weights(dtype: Dtype, quantization: Quantization | Weights) -> Weights:
    return quantization if isinstance(quantization, Weights) else typed(dtype, quantization)


def resolve_weights(
    spec: LLMDeploymentSpec, model_config: Config | None, *, from_config: bool
) -> Weights:
    """The weights of spec's model: from `model_config`'s quantization_config when the
    architecture came from it, else as spec.model.quantization says. PlanError when the two
    disagree or the checkpoint's format is not modelled."""
    model = spec.model
    wanted = model.quantization
    if model_config is None or not from_config:
        return typed(model.dtype, wanted)
    where = f"config.json of {described(model)}"
    try:
        found = checkpoint_weights(model_config)
    except ModelConfigError as error:
        raise PlanError(
            _ARCHITECTURE_FIELD,
            f"{where}: {error}; serve a checkpoint in a modelled format, or set "
            "spec.model.architecture and spec.model.quantization by hand",
            reason="ModelConfigUnsupported",
        ) from None
    if found is None:
        if wanted == "none":
            return typed(model.dtype, "none", f"{where}, which has no quantization_config")
        if wanted == "fp8":
            return typed(model.dtype, "fp8", f"{QUANTIZATION_FIELD} fp8 (quantized on load)")
        raise PlanError(
            QUANTIZATION_FIELD,
            f"{wanted} contradicts {where}, which has no "
            f"quantization_config (a 16-bit checkpoint): vLLM serves {wanted} only from a "
            f"checkpoint quantized that way. Use none, fp8 (quantized on load), or a {wanted} "
            "checkpoint",
            reason="QuantizationMismatch",
        )
    form = found.format
    if wanted not in ("none", form.spec_value):
        agree = "none" if form.spec_value is None else f"none or {form.spec_value}"
        raise PlanError(
            QUANTIZATION_FIELD,
            f"{wanted} contradicts {where}, whose quantization_config "
            f"says quant_method {form.method} ({form.description}); vLLM serves the "
            f"checkpoint's format, so set {agree}",
            reason="QuantizationMismatch",
        )
    return Weights(
        form.spec_value or "none",
        form.kernel,
        form.description,
        f"the quantization_config of {where}",
        checkpoint=found,
    )
