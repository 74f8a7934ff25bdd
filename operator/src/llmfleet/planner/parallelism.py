"""Which tensor-parallel sizes a model allows, and which GPU counts split into pods of a size."""

from __future__ import annotations

from llmfleet.models.model_spec import ModelArchitecture


def _kv_heads_split_evenly(arch: ModelArchitecture, tensor_parallel_size: int) -> bool:
    if arch.kv_lora_rank is not None:
        # Multi-latent attention caches one latent per token that every GPU holds whole.
        return True
    # vLLM shards KV heads when there are at least TP of them and replicates them otherwise;
    # either way the split must be even.
    kv_heads = arch.num_key_value_heads
    if kv_heads >= tensor_parallel_size:
        return kv_heads % tensor_parallel_size == 0
    return tensor_parallel_size % kv_heads == 0


def tensor_parallel_sizes(arch: ModelArchitecture, per_node: int) -> tuple[int, ...]:
    """Powers of two up to one node that divide the attention heads (and, for a mixture of
    experts, each expert's MLP width), smallest first.

    Powers of two because NCCL rings and vLLM's custom all-reduce are tuned for them and every
    node size the planner sees (1-16 GPUs) packs them evenly.
    """
    sizes: list[int] = []
    size = 1
    while size <= per_node:
        # vLLM splits each expert's MLP over the GPUs (FusedMoE's intermediate_size_per_partition).
        experts_split = (arch.expert_intermediate_size or size) % size == 0
        heads_split = arch.num_attention_heads % size == 0
        if heads_split and experts_split and _kv_heads_split_evenly(arch, size):
            sizes.append(size)
        size *= 2
    return tuple(sizes)


def splits_evenly(count: int, tensor_parallel_size: int, per_node: int) -> bool:
    """`count` GPUs form whole pods of `tensor_parallel_size`, and pods pack whole nodes."""
    if count % tensor_parallel_size:
        return False
    return count <= per_node or per_node % tensor_parallel_size == 0


def counts_that_split(tensor_parallel_size: int, per_node: int, how_many: int = 4) -> list[int]:
    """The first few GPU counts that `splits_evenly` accepts, for error messages."""
    counts: list[int] = []
    count = tensor_parallel_size
    while len(counts) < how_many and count <= 64 * per_node:
        within_rules = count <= per_node or count % per_node == 0
        if within_rules and splits_evenly(count, tensor_parallel_size, per_node):
            counts.append(count)
        count += tensor_parallel_size
    return counts
