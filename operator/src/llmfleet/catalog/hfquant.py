"""The quantized format a checkpoint declares in config.json's `quantization_config`, read as
the pinned vLLM (0.32) reads it, and the bytes each linear layer takes in it.

Formats (vLLM's quantization config class in parentheses; see docs/planner.md, "Quantized
weights"):

* `fp8` (Fp8Config): 8-bit float weights, one fp32 scale per tensor or, with
  `weight_block_size` [n, k] (DeepSeek-V3), one per n x k block (`weight_scale_inv`); modules
  in `ignored_layers` or `modules_to_not_convert` (exact names) stay 16-bit.
* `compressed-tensors` (CompressedTensorsConfig), one config group targeting Linear: float8 or
  int8 weights with activations (W8A8; scales per tensor, channel, group or block), float8
  weights alone (W8A16), or `pack-quantized` int4/int8 weights (WNA16, int32-packed with 16-bit
  group scales); `ignore` holds exact names or `re:` patterns.
* `awq` (AutoAWQConfig): int32-packed `bits`-bit qweight [in, out/pack], qzeros [in/group,
  out/pack] and 16-bit scales [in/group, out]; `modules_to_not_convert` (substrings) stay
  16-bit.
* `gptq` (AutoGPTQConfig): qweight [in/pack, out], qzeros [in/group, out/pack], 16-bit scales
  [in/group, out] and an int32 g_idx [in]; `modules_in_block_to_quantize` (substrings), when
  given, names the only modules quantized.

* `mxfp4` (GptOssMxfp4Config, gpt-oss): the routed experts only (vLLM 0.32 runs every linear
  layer of an MXFP4 checkpoint unquantized): 4-bit e2m1 weights packed two per byte
  (`*_blocks`) and one e8m0 byte per 32 inputs (`*_scales`).

Embeddings, norms, biases and routers stay 16-bit in all of them, and so does `lm_head` unless
an AWQ/GPTQ config sets `lm_head: true`. Everything else is refused naming it: bitsandbytes
(not a quantization method of vLLM 0.32), NVFP4/ModelOpt and the rest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from llmfleet.catalog.hfconfig_layers import Linear, ModelConfigError
from llmfleet.models.model_spec import Quantization

# What a linear layer's matrix multiply runs as: weights x activations bits. w8a8 runs on the
# 8-bit tensor cores; w8a16 and w4a16 dequantize to 16 bits inside the kernel (Marlin).
Kernel = Literal["w16a16", "w8a8", "w8a16", "w4a16"]
Match = Literal["exact", "substring", "compressed-tensors"]
ExpertLayout = Literal["triton-hopper"]

MODELLED_METHODS = ("fp8", "compressed-tensors", "awq", "gptq", "mxfp4")
_MXFP4_METHODS = ("mxfp4", "gpt_oss_mxfp4")
_MXFP4_BLOCK = 32  # inputs per e8m0 scale (OCP MX)
_EXPERTS = "mlp.experts"
_REFUSED = {
    "bitsandbytes": (
        "vLLM 0.32, the engine LLMFleet pins, has no bitsandbytes quantization method, so it "
        "cannot serve this checkpoint without a plugin"
    ),
}
_FP32 = 4
_HALF = 2
_INT32_BITS = 32
_PACKED_BITS = (4, 8)
_CT_FORMATS = ("float-quantized", "naive-quantized", "int-quantized", "pack-quantized")


@dataclass(frozen=True)
class QuantFormat:
    """A checkpoint's quantized format: how each linear layer it quantizes is stored."""

    method: str  # quant_method as config.json writes it
    description: str  # in words, e.g. "fp8 weights, one scale per 128x128 block"
    kernel: Kernel
    # The spec.model.quantization value that names this format; None: none does (only `none`,
    # "as the checkpoint is", agrees with it).
    spec_value: Quantization | None
    bits: int
    group: int | None = None  # inputs per scale; None: per tensor or per output channel
    block: tuple[int, int] | None = None  # (outputs, inputs) per scale
    channel_scales: bool = False
    scale_bytes: int = _HALF
    packed_zeros: bool = False  # int32-packed zero points per group (AWQ, GPTQ)
    g_idx: bool = False  # GPTQ's int32 group index per input
    static_input_scale: bool = False  # one fp32 activation scale per layer
    ignore: tuple[str, ...] = ()
    match: Match = "exact"
    only: tuple[str, ...] = ()  # GPTQ modules_in_block_to_quantize: the only ones quantized
    lm_head: bool = False
    # How vLLM holds the routed experts when it repacks them: "triton-hopper" (MXFP4 on the
    # TRITON backend, catalog/mxfp4_triton.py); None: as the checkpoint stores them.
    expert_layout: ExpertLayout | None = None

    @property
    def label(self) -> str:
        """A short name: what `X GiB of ... weights` calls them."""
        if self.method in ("awq", "gptq"):
            return f"{self.bits}-bit {self.method.upper()}"
        if self.method == "fp8":
            return "fp8"
        if self.method in _MXFP4_METHODS:
            return "MXFP4"
        precision = {"fp8": "fp8", "int8": "int8"}.get(
            self.spec_value or "", f"{self.bits}-bit int"
        )
        return f"{precision} compressed-tensors"

    @property
    def experts_only(self) -> bool:
        """Only the routed experts are quantized (MXFP4): the rest runs 16-bit kernels."""
        return self.only == (_EXPERTS,)

    def quantizes(self, name: str) -> bool:
        if self.only and not any(part in name for part in self.only):
            return False
        return not _matches(name, self.ignore, self.match)

    def linear_bytes(self, linear: Linear) -> float:
        """One copy of `linear` as the format stores it: packed weights and their scales,
        zero points and indices."""
        inputs, outputs = linear.inputs, linear.outputs
        total = inputs * outputs * self.bits / 8
        if self.block is not None:
            blocks = math.ceil(outputs / self.block[0]) * math.ceil(inputs / self.block[1])
            total += blocks * _FP32
        elif self.group is not None:
            groups = math.ceil(inputs / self.group) if self.group > 0 else 1
            total += groups * outputs * self.scale_bytes
            if self.packed_zeros:
                total += groups * outputs * self.bits / 8
        elif self.channel_scales:
            total += outputs * self.scale_bytes
        else:
            total += _FP32
        if self.g_idx:
            total += inputs * _FP32
        if self.static_input_scale:
            total += _FP32
        return total


def _matches(name: str, patterns: Sequence[str], match: Match) -> bool:
    for pattern in patterns:
        if match == "substring" and pattern in name:
            return True
        if match == "compressed-tensors" and pattern.startswith("re:"):
            if re.match(pattern[3:], name):
                return True
        elif pattern == name:
            return True
    return False


def _strings(value: object, key: str) -> tuple[str, ...]:
    """A list of module names; a list of such lists (GPTQ's modules_in_block_to_quantize, one
    per sequential step) is flattened, as vLLM does."""
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(item, list) for item in value):
        value = [name for names in value for name in names]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    raise ModelConfigError(f"quantization_config.{key} is not a list of module names")


def _int(config: Mapping[str, Any], key: str, allowed: Sequence[int] | None = None) -> int:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelConfigError(f"quantization_config.{key} is not a whole number ({value!r})")
    if allowed is not None and value not in allowed:
        raise ModelConfigError(
            f"quantization_config.{key} {value} is not modelled; modelled: "
            + ", ".join(str(a) for a in allowed)
        )
    return value


def _fp8(config: Mapping[str, Any]) -> QuantFormat:
    block = config.get("weight_block_size")
    ignore = _strings(
        config.get("ignored_layers") or config.get("modules_to_not_convert"), "ignored_layers"
    )
    static = config.get("activation_scheme") == "static"
    if block is None:
        return QuantFormat(
            "fp8",
            "fp8 weights, one scale per tensor",
            "w8a8",
            "fp8",
            8,
            static_input_scale=static,
            ignore=ignore,
        )
    if not (
        isinstance(block, list)
        and len(block) == 2
        and all(isinstance(b, int) and b > 0 for b in block)
    ):
        raise ModelConfigError(f"quantization_config.weight_block_size {block!r} is not [n, k]")
    return QuantFormat(
        "fp8",
        f"fp8 weights, one scale per {block[0]}x{block[1]} block",
        "w8a8",
        "fp8",
        8,
        block=(block[0], block[1]),
        ignore=ignore,
    )


def _gptq_or_awq(method: str, config: Mapping[str, Any]) -> QuantFormat:
    bits = _int(config, "bits" if "bits" in config else "w_bit", _PACKED_BITS)
    key = "group_size" if "group_size" in config else "q_group_size"
    group = _int(config, key)
    lm_head = bool(config.get("lm_head"))
    kernel: Kernel = "w4a16" if bits == 4 else "w8a16"
    spec: Quantization = "awq" if method == "awq" else "gptq"
    words = f"{bits}-bit {method.upper()} weights, one 16-bit scale and zero point per " + (
        f"{group} inputs" if group > 0 else "output channel"
    )
    if method == "awq":
        return QuantFormat(
            method,
            words,
            kernel,
            spec,
            bits,
            group=group,
            packed_zeros=True,
            ignore=_strings(config.get("modules_to_not_convert"), "modules_to_not_convert"),
            match="substring",
            lm_head=lm_head,
        )
    if config.get("dynamic"):
        raise ModelConfigError("quantization_config.dynamic (GPTQ per-module bits) is not modelled")
    return QuantFormat(
        method,
        words,
        kernel,
        spec,
        bits,
        group=group,
        packed_zeros=True,
        g_idx=True,
        only=_strings(config.get("modules_in_block_to_quantize"), "modules_in_block_to_quantize"),
        match="substring",
        lm_head=lm_head,
    )


def _compressed_tensors(config: Mapping[str, Any]) -> QuantFormat:
    layout = config.get("format")
    groups = config.get("config_groups")
    if layout not in _CT_FORMATS:
        raise ModelConfigError(
            f"compressed-tensors format {layout!r} is not modelled; modelled: "
            + ", ".join(_CT_FORMATS)
        )
    if not isinstance(groups, Mapping) or len(groups) != 1:
        raise ModelConfigError(
            "compressed-tensors with several config_groups (mixed precision) is not modelled"
        )
    group = next(iter(groups.values()))
    weights = group.get("weights") if isinstance(group, Mapping) else None
    if not isinstance(weights, Mapping) or "Linear" not in (group.get("targets") or []):
        raise ModelConfigError("compressed-tensors config group does not quantize Linear layers")
    kind, strategy = weights.get("type"), weights.get("strategy")
    activations = group.get("input_activations")
    ignore = _strings(config.get("ignore"), "ignore")
    if layout == "pack-quantized":
        bits = _int(weights, "num_bits", _PACKED_BITS)
        size = _int(weights, "group_size") if strategy == "group" else 0
        return QuantFormat(
            "compressed-tensors",
            f"{bits}-bit int weights packed in int32, one 16-bit scale per "
            + (f"{size} inputs" if size else "output channel"),
            "w4a16" if bits == 4 else "w8a16",
            None,
            bits,
            group=size,
            packed_zeros=not weights.get("symmetric", True),
            ignore=ignore,
            match="compressed-tensors",
        )
    bits = _int(weights, "num_bits", (8,))
    if kind not in ("float", "int") or (kind == "int" and not activations):
        without = "" if activations else " without activation quantization"
        raise ModelConfigError(
            f"compressed-tensors {kind} weights{without} are not modelled; modelled: float8 "
            "or int8 W8A8, float8 W8A16, pack-quantized int4/int8"
        )
    spec: Quantization = "fp8" if kind == "float" else "int8"
    kernel: Kernel = "w8a8" if activations else "w8a16"
    precision = "fp8" if kind == "float" else "int8"
    dynamic = isinstance(activations, Mapping) and bool(activations.get("dynamic"))
    static = isinstance(activations, Mapping) and not dynamic
    base = QuantFormat(
        "compressed-tensors",
        "",
        kernel,
        spec,
        bits,
        ignore=ignore,
        match="compressed-tensors",
        static_input_scale=static and activations.get("strategy") == "tensor",
    )
    if strategy == "tensor":
        return _with(base, f"{precision} {kernel.upper()}, one scale per tensor")
    if strategy == "channel":
        return _with(
            base, f"{precision} {kernel.upper()}, one scale per output channel", channel_scales=True
        )
    if strategy == "group":
        size = _int(weights, "group_size")
        return _with(base, f"{precision} {kernel.upper()}, one scale per {size} inputs", group=size)
    if strategy == "block":
        shape = weights.get("block_structure")
        if isinstance(shape, list) and len(shape) == 2:
            return _with(
                base,
                f"{precision} {kernel.upper()}, one scale per {shape[0]}x{shape[1]} block",
                block=(int(shape[0]), int(shape[1])),
            )
    raise ModelConfigError(f"compressed-tensors weight strategy {strategy!r} is not modelled")


def _mxfp4(method: str) -> QuantFormat:
    return QuantFormat(
        method,
        f"MXFP4 experts: 4-bit e2m1 weights, one e8m0 scale per {_MXFP4_BLOCK} inputs; "
        "attention, router, embeddings and lm_head 16-bit",
        "w4a16",
        None,
        4,
        group=_MXFP4_BLOCK,
        scale_bytes=1,
        only=(_EXPERTS,),
        match="substring",
        expert_layout="triton-hopper",
    )


def _with(base: QuantFormat, description: str, **changes: Any) -> QuantFormat:
    return replace(base, description=description, **changes)


def quant_format(config: Mapping[str, Any]) -> QuantFormat | None:
    """The format config.json's quantization_config declares; None for a 16-bit checkpoint.
    ModelConfigError names a format the planner does not model."""
    quantization = config.get("quantization_config")
    if quantization is None:
        return None
    if not isinstance(quantization, Mapping):
        raise ModelConfigError("config.json's quantization_config is not an object")
    method = str(quantization.get("quant_method", "")).lower()
    if method == "fp8":
        return _fp8(quantization)
    if method in ("awq", "gptq"):
        return _gptq_or_awq(method, quantization)
    if method == "compressed-tensors":
        return _compressed_tensors(quantization)
    if method in _MXFP4_METHODS:
        return _mxfp4(method)
    why = _REFUSED.get(method, "the planner does not model it")
    raise ModelConfigError(
        f"quantization_config.quant_method {method!r} is not modelled ({why}); modelled: "
        + ", ".join(MODELLED_METHODS)
    )
