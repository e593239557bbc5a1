"""Tiny real Llama models built from configs (no downloads), saved like any checkpoint.

Used by the tests and the benchmarks to exercise the real loading path (``save_pretrained``
directory -> ``load_model``) on a machine with no model hub. A draft made ``like`` a target is the
target's weights plus Gaussian noise: it agrees with its target often but not always, as a
distilled draft would.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

WORDS = ["<unk>", "<eos>"] + [f"w{i}" for i in range(30)]  # a 32-token vocabulary


def make_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>")


def make_tiny_model(
    directory: Path,
    *,
    seed: int,
    layers: int,
    hidden: int,
    words: list[str] = WORDS,
    like: str | None = None,
    noise: float = 0.0,
    sliding_window: int | None = None,
    qwen2: bool = False,
    init: float = 0.3,
) -> str:
    """Save a random Llama (sharp logits from a large init, so argmax ties never occur); return its path.
    With ``sliding_window`` it is a Mistral instead, whose layers attend to their last W positions only;
    with ``qwen2`` a Qwen2, a Llama with biases on q, k and v (drawn at random here, not left at zero). A small
    ``init`` gives flat logits instead, full of near-ties between the best tokens."""
    torch.manual_seed(seed)
    architecture, config_class = (
        (MistralForCausalLM, MistralConfig) if sliding_window else (LlamaForCausalLM, LlamaConfig)
    )
    if qwen2:
        architecture, config_class = Qwen2ForCausalLM, Qwen2Config
    window = dict(sliding_window=sliding_window) if sliding_window else {}
    config = config_class(
        vocab_size=len(words),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=1,
        bos_token_id=None,
        pad_token_id=None,
        initializer_range=init,
        tie_word_embeddings=False,
        **window,
    )
    model = architecture(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("_proj.bias"):
                param.normal_(0.0, 0.3)
    if like is not None:
        reference = architecture.from_pretrained(like).state_dict()
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(reference[name] + noise * reference[name].std() * torch.randn_like(param))
    model.save_pretrained(directory)
    make_tokenizer(words).save_pretrained(directory)
    return str(directory)


def make_tiny_pair(root: Path, noise: float = 0.3) -> dict[str, str]:
    """A target, a noisy-copy draft, and a draft with a different vocabulary (for mismatch errors)."""
    target = make_tiny_model(root / "target", seed=1, layers=4, hidden=64)
    return {
        "target": target,
        "draft": make_tiny_model(root / "draft", seed=2, layers=4, hidden=64, like=target, noise=noise),
        "other_vocab": make_tiny_model(
            root / "other", seed=3, layers=2, hidden=32, words=WORDS[:2] + [f"v{i}" for i in range(30)]
        ),
    }
