"""vLLM's pipeline stages: the layers and weights each stage's GPUs hold, and the start-up check
vLLM runs on every stage's KV cache, so that the planner never plans a layout vLLM refuses.

vLLM 0.32 builds the KV cache in vllm/v1/core/kv_cache_utils.py `get_kv_cache_configs` from
every worker's own layers and its own free memory (`determine_available_memory`, which is what
the worker's budget leaves after its weights and its profiled activations):

* `_project_kv_cache_groups_to_worker`: a worker's KV cache groups hold only its stage's layers
  (vLLM 0.14-0.15 checked each stage against every layer of the model, refusing PP > 1 where the
  cache fitted: vllm-project/vllm#32105, fixed by #33698);
* `check_memory = avail_mem - _pool_bytes_per_block(groups)`: one block of every worker is held
  back as BlockPool's null block (#47272);
* `_check_enough_kv_cache_memory` raises "To serve at least one request with the models's max seq
  len ..." when `_max_memory_usage_bytes_from_groups` (cdiv(max_model_len, 16) blocks of each
  full-attention group) exceeds `check_memory` on any worker;
* `min_num_blocks = min(...)`: every worker then keeps the fewest blocks of any worker, as a
  sequence holds the same block ids on every stage; "GPU KV cache size" is those blocks x 16.

vllm/distributed/utils.py `get_pp_indices` gives each stage num_layers // pp layers and the
remainder one more each to the stages before the last, from the last but one backwards. The
first stage also holds the input embeddings and the last the output head, a copy of the
embeddings when they are tied (vLLM's LlamaModel builds embed_tokens on the last rank then).
"""

from __future__ import annotations

# BlockPool's null block, which no sequence may use (see the module docstring).
NULL_BLOCKS = 1


def stage_layers(num_layers: int, pipeline_parallel_size: int) -> tuple[int, ...]:
    """The layers of each stage, as vLLM's get_pp_indices splits them."""
    base, extra = divmod(num_layers, pipeline_parallel_size)
    layers = [base] * pipeline_parallel_size
    for stage in range(2, extra + 2):
        layers[-stage] += 1
    return tuple(layers)


def stage_weights_gib(
    total_gib: float, matrix_gib: float, matrices: int, layers: tuple[int, ...]
) -> tuple[float, ...]:
    """Each stage's weights: its layers' share of all but the `matrices` embedding matrices of
    `matrix_gib` each, plus the input embeddings on the first stage and the output head on the
    last."""
    if len(layers) == 1:
        return (total_gib,)
    per_layer = (total_gib - matrices * matrix_gib) / sum(layers)
    weights = [count * per_layer for count in layers]
    weights[0] += matrix_gib
    weights[-1] += matrix_gib
    return tuple(weights)


def passes_kv_check(blocks: int, blocks_per_sequence: int) -> bool:
    """vLLM's start-up check on a stage of `blocks` KV blocks: one sequence of max_model_len
    tokens (`blocks_per_sequence` blocks) fits beside the null block."""
    return blocks - NULL_BLOCKS >= blocks_per_sequence
