"""EAGLE's draft network: one decoder layer that reads the target's own top features (Li et al. 2024, arXiv 2401.15077).

The target's final (normed) hidden state f_t is what its output head reads to score token t+1. EAGLE drafts in that
feature space instead of re-reading the text: at position t its input is the feature f_t and the embedding of the
token x_{t+1} sampled from it (which removes the feature's uncertainty about which token was chosen, EAGLE Sec. 3.1),

    x      = W_fc [f_t ; e(x_{t+1})] + b_fc                      (d x 2d projection)
    f^_{t+1} = n(Layer(x))                                         one Llama decoder layer of the target's shape, its
                                                                   own KV cache, then the target's final RMSNorm n
    q_{t+2} = softmax(W_head f^_{t+1})                              the target's frozen output embedding, over FR-Spec's
                                                                   K most frequent tokens (Zhao et al. 2025)

and it drafts on: the next input is (f^_{t+1}, e(x_{t+2})). The embedding, the final norm's gain and the output head
are the target's, read at run time; only W_fc, b_fc and the layer are the head's own, shipped as float16 safetensors
with the token ranking its head uses.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import DynamicCache, PreTrainedModel

from specviz import WEIGHTS_DIR
from specviz.runtime.cpu.kernel_paths import Projection
from specviz.runtime.llama_step import LlamaLayer, LlamaWeights, llama_layer, rms_norm, rotary_tables
from specviz.runtime.loaded import LoadedModel, memoised_while_alive
from specviz.runtime.vocab_ranking import to_full_vocab

WEIGHTS_FILE = WEIGHTS_DIR / "smollm2-135m-eagle.safetensors"
MANIFEST_FILE = WEIGHTS_FILE.with_suffix(".json")
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")  # the layer's matrices; its two norm gains beside them


@dataclass(frozen=True)
class EagleShape:
    """What a head file was made for: the target's shapes, its vocabulary and the head size K it ships with."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    draft_vocab: int
    target: str

    @classmethod
    def of_target(cls, target: LoadedModel, draft_vocab: int) -> EagleShape:
        """The shape of a head for ``target`` (its config's sizes, its output vocabulary) shipping a head of
        ``draft_vocab`` tokens (0: all): the one place a shape is made from a model (a file's is read back from its
        metadata)."""
        config = target.model.config
        heads = int(config.num_attention_heads)
        return cls(
            hidden=int(config.hidden_size),
            intermediate=int(config.intermediate_size),
            heads=heads,
            kv_heads=int(config.num_key_value_heads),
            head_dim=int(getattr(config, "head_dim", None) or config.hidden_size // heads),  # as llama_weights reads it
            vocab=int(target.model.get_output_embeddings().out_features),
            draft_vocab=draft_vocab,
            target=target.spec,
        )


class EagleHead(nn.Module):
    """W_fc (d, 2d) + b_fc and one decoder layer, its weights named as :class:`LlamaLayer`'s."""

    def __init__(self, shape: EagleShape) -> None:
        super().__init__()
        self.shape = shape
        d, inner = shape.hidden, shape.intermediate
        self.fc = nn.Linear(2 * d, d)
        sizes = dict(
            q=(shape.heads * shape.head_dim, d),
            k=(shape.kv_heads * shape.head_dim, d),
            v=(shape.kv_heads * shape.head_dim, d),
            o=(d, shape.heads * shape.head_dim),
            gate=(inner, d),
            up=(inner, d),
            down=(d, inner),
        )
        self.layer_weights = nn.ParameterDict(
            {name: nn.Parameter(torch.randn(size) / math.sqrt(size[1])) for name, size in sizes.items()}
        )
        self.layer_weights["attention_norm"] = nn.Parameter(torch.ones(d))
        self.layer_weights["mlp_norm"] = nn.Parameter(torch.ones(d))

    def layer(self) -> LlamaLayer:
        weights = self.layer_weights
        q, k, v, o, gate, up, down = (Projection(weights[name]) for name in PROJECTIONS)
        return LlamaLayer(q, k, v, o, gate, up, down, weights["attention_norm"], weights["mlp_norm"])


def eagle_step(
    head: EagleHead,
    target: LlamaWeights,
    features: torch.Tensor,
    tokens: torch.Tensor,
    positions: torch.Tensor,
    allowed: torch.Tensor | None,
    cache: DynamicCache | None,
) -> torch.Tensor:
    """Predicted features f^ (B, T, H) from features (B, T, H) and the next tokens (B, T) at ``positions`` (T,).

    Each row attends to the cache and to the new rows where ``allowed`` (T, cached + T) is True (None: one new row,
    everything cached); ``target`` gives the target's embedding, rotary frequencies, final norm gain and head shapes.
    """
    embedded = target.embedding(tokens).float()  # (B, T, H)
    x = head.fc(torch.cat([features.float(), embedded], dim=-1))  # (B, T, H)
    cos, sin = rotary_tables(target.inverse_frequencies, positions, x.dtype)
    x = llama_layer(target, head.layer(), x, cos, sin, allowed, cache, 0)
    return rms_norm(x, target.final_norm.float(), target.eps)


def output_rows(target: PreTrainedModel, ids: torch.Tensor) -> torch.Tensor:
    """The target's output-head rows (K, H) for the head's token ids (K,), in float32, as :func:`head_logits` reads
    them."""
    return target.get_output_embeddings().weight.detach()[ids].float()


def head_logits(predicted: torch.Tensor, head_ids: torch.Tensor, head_rows: torch.Tensor, vocab: int) -> torch.Tensor:
    """Logits (..., V) of predicted features (..., H) through the head's K rows (K, H); -inf off the head, so q is
    exactly 0 there and every rule still sees exactly the q a token was drawn from."""
    return to_full_vocab(predicted.float() @ head_rows.T, head_ids, vocab)


def save_head(head: EagleHead, vocab_order: torch.Tensor, manifest: dict, path: Path = WEIGHTS_FILE) -> None:
    """The head's own weights (float16), its token ranking, its shape in the metadata; the manifest beside it."""
    tensors = {name: t.detach().to(torch.float16).contiguous().cpu() for name, t in head.state_dict().items()}
    tensors["vocab_order"] = vocab_order.to(torch.int32).contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"specviz-eagle": json.dumps(dataclasses.asdict(head.shape))})
    path.with_suffix(".json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


@functools.lru_cache(maxsize=4)
def load_head(path: str, device: str = "cpu") -> tuple[EagleHead, torch.Tensor]:
    """(head, vocab order) from a safetensors file (no pickle), float32, eval mode: loaded once per process and
    shared read-only, like the models."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no EAGLE head at {path}")
    with safe_open(path, framework="pt") as f:
        shape = EagleShape(**json.loads(f.metadata()["specviz-eagle"]))
    tensors = load_file(path)
    vocab_order = tensors.pop("vocab_order").long()
    head = EagleHead(shape)
    head.load_state_dict({name: t.float() for name, t in tensors.items()})
    return head.to(device).eval().requires_grad_(False), vocab_order.to(device)


@memoised_while_alive
def trimmed_rows(target: LoadedModel, path: str, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The head's K token ids (K,) and the target's output rows for them (K, H) in float32, made once per target."""
    _, vocab_order = load_head(path, str(target.device))
    ids = vocab_order[:k] if k else torch.arange(len(vocab_order), device=target.device)
    return ids, output_rows(target.model, ids)
