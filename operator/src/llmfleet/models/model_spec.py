"""`spec.model`: which weights to serve and the architecture figures the planner sizes them by."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from llmfleet.models.base import ApiModel, CelRule
from llmfleet.models.refs import SecretKeyRef, VolumeClaimRef

Dtype = Literal["auto", "bfloat16", "float16", "float32"]
Quantization = Literal["none", "fp8", "int8", "awq", "gptq"]


class ModelArchitecture(ApiModel):
    """Architecture figures from the model's config.json, used to size weights and KV cache."""

    cel_rules = (
        CelRule(
            rule="self.numAttentionHeads % self.numKeyValueHeads == 0",
            message=(
                "numKeyValueHeads must divide numAttentionHeads (grouped-query attention "
                "shares each key/value head between a whole number of query heads)"
            ),
            holds=lambda a: a.num_attention_heads % a.num_key_value_heads == 0,
            field="numKeyValueHeads",
        ),
        CelRule(
            rule=(
                "!has(self.slidingWindowLayers) || (has(self.slidingWindow) && "
                "self.slidingWindowLayers <= self.numLayers)"
            ),
            message=(
                "slidingWindowLayers needs slidingWindow and must be at most numLayers (the "
                "layers that attend to the window are among the model's layers)"
            ),
            holds=lambda a: (
                a.sliding_window_layers is None
                or (a.sliding_window is not None and a.sliding_window_layers <= a.num_layers)
            ),
            field="slidingWindowLayers",
        ),
        CelRule(
            rule=(
                "has(self.numExperts) == has(self.numExpertsPerToken) && "
                "has(self.numExperts) == has(self.activeParametersBillions)"
            ),
            message=(
                "a mixture-of-experts model needs numExperts, numExpertsPerToken and "
                "activeParametersBillions together, or none of them"
            ),
            holds=lambda a: (
                (a.num_experts is None)
                == (a.num_experts_per_token is None)
                == (a.active_parameters_billions is None)
            ),
            field="numExperts",
        ),
        CelRule(
            rule=(
                "!has(self.numExperts) || (self.numExpertsPerToken < self.numExperts && "
                "self.activeParametersBillions < self.parametersBillions)"
            ),
            message=(
                "numExpertsPerToken must be less than numExperts, and activeParametersBillions "
                "less than parametersBillions (each token runs a few of the experts)"
            ),
            holds=lambda a: (
                a.num_experts is None
                or (
                    a.num_experts_per_token is not None
                    and a.active_parameters_billions is not None
                    and a.num_experts_per_token < a.num_experts
                    and a.active_parameters_billions < a.parameters_billions
                )
            ),
            field="numExpertsPerToken",
        ),
        CelRule(
            rule="has(self.kvLoraRank) == has(self.qkRopeHeadDim)",
            message=(
                "multi-latent attention needs kvLoraRank and qkRopeHeadDim together: its KV "
                "cache holds both per token per layer"
            ),
            holds=lambda a: (a.kv_lora_rank is None) == (a.qk_rope_head_dim is None),
            field="kvLoraRank",
        ),
    )

    parameters_billions: float = Field(
        gt=0,
        le=10_000,
        description=(
            "Total parameter count in billions (e.g. 70.6 for Llama-3.1-70B), counting "
            "embeddings. Multiplied by the bytes per weight of dtype/quantization to size "
            "the weights."
        ),
    )
    num_layers: int = Field(
        ge=1, le=1_000, description="Transformer layers (config.json num_hidden_layers)."
    )
    num_attention_heads: int = Field(
        ge=1,
        le=1_024,
        description=(
            "Query attention heads (config.json num_attention_heads). The tensor-parallel "
            "size must divide it."
        ),
    )
    num_key_value_heads: int = Field(
        ge=1,
        le=1_024,
        description=(
            "Key/value heads (config.json num_key_value_heads; equal to numAttentionHeads "
            "for models without grouped-query attention). Sizes the KV cache."
        ),
    )
    head_dim: int = Field(
        ge=1,
        le=4_096,
        description=(
            "Dimension of one attention head (config.json head_dim, or hidden_size / "
            "num_attention_heads when absent)."
        ),
    )
    max_position_embeddings: int = Field(
        ge=16,
        description=(
            "Longest context the model supports, in tokens (config.json "
            "max_position_embeddings). Caps spec.engine.maxModelLen."
        ),
    )
    vocab_size: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description=(
            "Vocabulary size (config.json vocab_size). With quantization fp8 vLLM keeps the "
            "embeddings and the output head (vocabSize x numAttentionHeads x headDim each) in "
            "16 bits, and the planner counts them so; unset, it counts every weight at 8 bits."
        ),
    )
    tie_word_embeddings: bool = Field(
        default=False,
        description=(
            "The output head shares the input embeddings' weights (config.json "
            "tie_word_embeddings): one vocabulary matrix instead of two."
        ),
    )
    hidden_size: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description=(
            "Width of the residual stream (config.json hidden_size). Sizes the LoRA buffers; "
            "unset, numAttentionHeads x headDim (which the activation reserve always uses)."
        ),
    )
    intermediate_size: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description=(
            "Width of the MLP (config.json intermediate_size). Sizes the LoRA buffers; unset, "
            "derived from parametersBillions as a gated (Llama-style) MLP's width, which errs "
            "high when vocabSize is unset."
        ),
    )
    # Families beyond dense full attention. Unset, a layer attends to the whole context, every
    # parameter runs for every token, and the KV cache holds numKeyValueHeads heads per layer.
    sliding_window: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description=(
            "Tokens a sliding-window (local) attention layer attends to (config.json "
            "sliding_window; Gemma 2/3, Mistral-7B-v0.1). vLLM keeps only about that many "
            "tokens of such a layer's KV cache per sequence (plus maxNumBatchedTokens while "
            "prefilling), so sequences longer than the window take less cache."
        ),
    )
    sliding_window_layers: int | None = Field(
        default=None,
        ge=0,
        le=1_000,
        description=(
            "How many of numLayers use slidingWindow; the others attend to the whole context "
            "(Gemma 3: 5 of every 6 layers, Gemma 2: every other one). Unset with slidingWindow "
            "set, every layer does. At most numLayers; needs slidingWindow."
        ),
    )
    num_experts: int | None = Field(
        default=None,
        ge=2,
        le=100_000,
        description=(
            "Routed experts per mixture-of-experts layer (config.json num_local_experts, "
            "num_experts or n_routed_experts). The weights count all of them; each token runs "
            "numExpertsPerToken. Set with numExpertsPerToken and activeParametersBillions."
        ),
    )
    num_experts_per_token: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description=(
            "Routed experts each token runs (config.json num_experts_per_tok), less than "
            "numExperts."
        ),
    )
    active_parameters_billions: float | None = Field(
        default=None,
        gt=0,
        le=10_000,
        description=(
            "Parameters one token runs through, in billions (e.g. 3.3 for Qwen3-30B-A3B): "
            "everything but the routed experts, plus numExpertsPerToken of them per layer. "
            "Predicted speed counts these FLOPs per token; the weights read per step are the "
            "shared part plus the experts the batch's tokens touch. Less than parametersBillions."
        ),
    )
    expert_intermediate_size: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description=(
            "Width of one expert's MLP (config.json moe_intermediate_size, or intermediate_size "
            "for Mixtral). vLLM splits every expert over the tensor-parallel GPUs, so the "
            "tensor-parallel size must divide it; unset, that is not checked."
        ),
    )
    kv_lora_rank: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description=(
            "Multi-latent attention (DeepSeek-V2/V3): the width of the compressed key/value "
            "latent (config.json kv_lora_rank). The KV cache then holds kvLoraRank + "
            "qkRopeHeadDim values per token per layer instead of key and value heads, and every "
            "tensor-parallel GPU holds all of it (vLLM does not shard the latent). Set with "
            "qkRopeHeadDim."
        ),
    )
    qk_rope_head_dim: int | None = Field(
        default=None,
        ge=1,
        le=100_000,
        description=(
            "Multi-latent attention: the rotary part of each key that is cached beside the "
            "latent (config.json qk_rope_head_dim). Set with kvLoraRank."
        ),
    )


# One segment of a Hugging Face repo id; also what an adapter may be called.
NAME_SEGMENT_PATTERN = r"[A-Za-z0-9][-A-Za-z0-9_.]*"
# A Hugging Face repo id (`name` or `org/name`) or an absolute path; never whitespace.
LOCAL_OR_HUB_PATTERN = rf"{NAME_SEGMENT_PATTERN}(/{NAME_SEGMENT_PATTERN})?|/[^\s]*"
# ... or an s3:// or gs:// URI, which vLLM streams weights from.
MODEL_NAME_PATTERN = rf"^({LOCAL_OR_HUB_PATTERN}|(s3|gs)://[^\s]+)$"
# A Hub revision: a branch or tag (git ref names, which may hold '/', as refs/pr/1) or a commit.
REVISION_PATTERN = r"^[A-Za-z0-9][-A-Za-z0-9_./]*$"
Revision = Annotated[str, Field(min_length=1, max_length=255, pattern=REVISION_PATTERN)]


class ModelSpec(ApiModel):
    """The model to serve."""

    name: str = Field(
        min_length=1,
        max_length=1_024,
        pattern=MODEL_NAME_PATTERN,
        description=(
            "What vLLM loads (--model), one of: a Hugging Face repo id, `name` or "
            "`org/name` of letters, digits, '-', '_' and '.' (e.g. "
            "meta-llama/Llama-3.1-70B-Instruct); an absolute path inside the container "
            "(/models/llama, e.g. on spec.model.cache); or an object-store URI that vLLM "
            "streams from (s3://bucket/path, gs://bucket/path). No spaces. Well-known ids are "
            "in the built-in catalog, so architecture can be omitted for them."
        ),
    )
    served_model_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description=(
            "Name clients use in the OpenAI API `model` field (vLLM --served-model-name). "
            "Defaults to name."
        ),
    )
    dtype: Dtype = Field(
        default="auto",
        description=(
            "Weight and activation dtype (vLLM --dtype). auto uses the checkpoint's 16-bit "
            "dtype; the planner counts 2 bytes per weight for auto, bfloat16 and float16 and "
            "4 for float32. One of auto, bfloat16, float16, float32. Default auto."
        ),
    )
    quantization: Quantization = Field(
        default="none",
        description=(
            "Weight quantization. none serves the checkpoint as it is: when the planner reads "
            "the model's config.json, a pre-quantized checkpoint (its quantization_config: "
            "fp8, compressed-tensors, AWQ, GPTQ) is sized as that format stores it and vLLM "
            "reads the format itself. fp8 quantizes a 16-bit checkpoint on load (vLLM "
            "--quantization fp8; needs Hopper/Ada or newer GPUs), or names an fp8 checkpoint's "
            "format; int8, awq and gptq name a checkpoint already quantized that way. A value "
            "that contradicts the checkpoint's quantization_config is refused (Planned=False, "
            "QuantizationMismatch), naming both. Without config.json (catalog, architecture) "
            "the planner counts 1 byte per weight for fp8 and int8, 0.5 for awq and gptq. One "
            "of none, fp8, int8, awq, gptq. Default none."
        ),
    )
    revision: Revision | None = Field(
        default=None,
        description=(
            "Hub revision of the model: a branch, a tag or a commit hash (vLLM --revision, "
            "passed only when set). The operator reads config.json at this revision when it "
            "needs the architecture from the Hub. Unset: the Hub's main branch."
        ),
    )
    architecture: ModelArchitecture | None = Field(
        default=None,
        description=(
            "Architecture figures for sizing. Optional: the planner takes, first found, this "
            "field (an override), the built-in catalog's figures for name, or the model's "
            "config.json, which the operator reads from the Hugging Face Hub (its "
            "--hf-endpoint, with tokenSecretRef's token) at revision. Required for a name "
            "that is a path or an s3:// or gs:// URI outside the catalog, whose config.json "
            "the operator cannot read."
        ),
    )
    token_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description=(
            "Secret key holding a Hugging Face access token, exposed to vLLM as HF_TOKEN. "
            "Needed for gated models such as meta-llama/*."
        ),
    )
    cache: VolumeClaimRef | None = Field(
        default=None,
        description=(
            "PersistentVolumeClaim mounted as the Hugging Face cache so restarts and new "
            "replicas skip the download. Without it each pod downloads into an emptyDir."
        ),
    )
