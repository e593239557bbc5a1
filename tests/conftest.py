"""Shared fixtures: tiny real models built from configs (no downloads) and the embedded default.

Tiny models are written with ``save_pretrained`` (safetensors) and loaded back through the same
``load_model`` path a hub id or a user's directory takes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specviz.engine import ModelPair
from specviz.models import load_model

WORDS = ["<unk>", "<eos>"] + [f"w{i}" for i in range(30)]  # a 32-token vocabulary


def make_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    core = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>")


def make_tiny_model(
    directory: Path, *, seed: int, layers: int, hidden: int, words: list[str] = WORDS, like: str | None = None, noise: float = 0.0
) -> str:
    """A random Llama saved like a real checkpoint; sharp logits (large init) so argmax ties never occur.

    With ``like``, the weights are that model's plus Gaussian noise of relative size ``noise``: a draft
    that agrees with its target often but not always, as a distilled draft would.
    """
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(words), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, eos_token_id=1,
        bos_token_id=None, pad_token_id=None, initializer_range=0.3, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).eval()
    if like is not None:
        reference = LlamaForCausalLM.from_pretrained(like).state_dict()
        with torch.no_grad():
            for name, param in model.named_parameters():
                param.copy_(reference[name] + noise * reference[name].std() * torch.randn_like(param))
    model.save_pretrained(directory)
    make_tokenizer(words).save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tiny")
    target = make_tiny_model(root / "target", seed=1, layers=4, hidden=64)
    return {
        "target": target,
        "draft": make_tiny_model(root / "draft", seed=2, layers=4, hidden=64, like=target, noise=0.3),
        "other_vocab": make_tiny_model(root / "other", seed=3, layers=2, hidden=32, words=WORDS[:2] + [f"v{i}" for i in range(30)]),
    }


@pytest.fixture(scope="session")
def tiny_pair(tiny_dirs) -> ModelPair:
    return ModelPair(load_model(tiny_dirs["target"], "cpu"), load_model(tiny_dirs["draft"], "cpu"))


@pytest.fixture(scope="session")
def embedded():
    os.environ.setdefault("SPECVIZ_CACHE", str(Path.home() / ".cache" / "specviz"))
    return load_model("embedded", "cpu")


def target_greedy(loaded, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """The target's own greedy decoding through transformers' generate."""
    ids = torch.tensor([prompt_ids])
    with torch.inference_mode():
        out = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens)
    return out[0, len(prompt_ids):].tolist()
