"""Makes a tiny random Llama that vLLM can serve on a CPU: no model hub is reachable here.

Run with the vLLM virtualenv's python (it needs torch, transformers and tokenizers):

    $(dev/dataplane/install-vllm.sh) /bin/python dev/dataplane/tiny_model.py [--print-path]
        [--shape tiny|prefill]

Prints the model directory, `${LLMFLEET_CACHE:-~/.cache/llmfleet}/models/tiny-llama-<VERSION>`
(`tiny-llama-prefill-<VERSION>` for `--shape prefill`). The model is made once
(deterministically: fixed seed, fixed training text) and reused; bump VERSION when anything here
changes what is written.

Its shape is chosen for vLLM's CPU backend: head_dim 64 is one its attention kernel supports
(it wants 32, 64, 80, 96, 112, 128, ...), and the whole model is ~0.6 MB, so vLLM starts on it in
well under a minute with `--enforce-eager`. The weights are random: it writes gibberish, but real
tokens through the real engine, scheduler, KV cache and metrics.

`--shape prefill` (~17 M parameters, ~35 MB) is for bench/router_prefix.py: the test model
prefills a 700-token prompt in a few milliseconds, too fast for a prefix-cache hit to show in time
to first token; this one spends most of a request's time in prefill, as real models on real
prompts do. Same tokenizer, same head_dim.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

VERSION = "v1"
NAME = f"tiny-llama-{VERSION}"
# LlamaConfig arguments per shape; "tiny" is the test model (the default, NAME).
SHAPES: dict[str, dict[str, int]] = {
    "tiny": {
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
    },
    "prefill": {
        "hidden_size": 512,
        "intermediate_size": 1024,
        "num_hidden_layers": 7,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
    },
}
SEED = 1234
VOCAB_SIZE = 1024
MAX_POSITIONS = 2048

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
PAD = "<|pad|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = [BOS, EOS, PAD, IM_START, IM_END]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Training text for the tokenizer: fixed, so the vocabulary is the same on every machine.
_CORPUS = """\
Beautiful is better than ugly. Explicit is better than implicit. Simple is better than complex.
Complex is better than complicated. Flat is better than nested. Sparse is better than dense.
Readability counts. Special cases aren't special enough to break the rules.
Although practicality beats purity. Errors should never pass silently.
Unless explicitly silenced. In the face of ambiguity, refuse the temptation to guess.
There should be one-- and preferably only one --obvious way to do it.
Now is better than never. Although never is often better than *right* now.
If the implementation is hard to explain, it's a bad idea.
If the implementation is easy to explain, it may be a good idea.
Namespaces are one honking great idea -- let's do more of those!
The quick brown fox jumps over the lazy dog. A large language model serves completions and chat.
Kubernetes schedules pods onto nodes; a deployment keeps replicas running; a service routes
requests to ready endpoints. The autoscaler adds replicas when requests wait in the queue and
removes them when the fleet is idle. Tokens per second, time to first token, and the number of
requests running or waiting are the signals that matter for serving.
0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 32 64 128 256 512 1024 2048 4096 8192
Hello, world! How are you today? I am fine, thank you. What is the capital of France? Paris.
Once upon a time there was a small model that ran on a CPU and answered every question.
"""


def cache_root() -> Path:
    return Path(os.environ.get("LLMFLEET_CACHE", Path.home() / ".cache" / "llmfleet"))


def name(shape: str = "tiny") -> str:
    return NAME if shape == "tiny" else f"tiny-llama-{shape}-{VERSION}"


def model_dir(shape: str = "tiny") -> Path:
    return cache_root() / "models" / name(shape)


def _build(out: Path, shape: str) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Numbers written out give the trainer enough merges for a ~1000-token vocabulary.
    numbers = [" ".join(str(i) for i in range(n, n + 50)) for n in range(0, 5000, 50)]
    tok.train_from_iterator(_CORPUS.splitlines() * 4 + numbers, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=MAX_POSITIONS,
        chat_template=CHAT_TEMPLATE,
    )
    fast.save_pretrained(out)
    # transformers 5 writes the template to chat_template.jinja; older readers look for it in
    # tokenizer_config.json, so it goes there too (the same text).
    tc_path = out / "tokenizer_config.json"
    tc = json.loads(tc_path.read_text())
    tc["chat_template"] = CHAT_TEMPLATE
    tc_path.write_text(json.dumps(tc, indent=2, sort_keys=True) + "\n")

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        **SHAPES[shape],
        head_dim=64,
        max_position_embeddings=MAX_POSITIONS,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=tok.token_to_id(BOS),
        eos_token_id=tok.token_to_id(EOS),
        pad_token_id=tok.token_to_id(PAD),
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    model.save_pretrained(out, safe_serialization=True)


def ensure(shape: str = "tiny") -> Path:
    """Make the model unless it exists; safe against concurrent callers."""
    target = model_dir(shape)
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / "config.json").exists():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        try:
            _build(tmp, shape)
            tmp.chmod(0o755)
            tmp.rename(target)  # whole or not at all: config.json is written before the rename
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--print-path", action="store_true", help="print the directory, make nothing")
    p.add_argument("--shape", choices=sorted(SHAPES), default="tiny", help="default: tiny")
    args = p.parse_args()
    print(model_dir(args.shape) if args.print_path else ensure(args.shape))
    return 0


if __name__ == "__main__":
    sys.exit(main())
