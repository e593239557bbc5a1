"""A plain Llama decoder's cached forward written directly in torch, for draft passes (small draft models and
the layer-skip self-draft) and every pass of a quantised model. Qwen2 is the same decoder with biases on the query,
key and value projections (Qwen2 technical report, Yang et al. 2024, arXiv 2407.10671, Sec. 2.1), which the step
adds.

A 4-layer draft on a CPU holds its weights in the cache, so its one-token step is mostly the Python
around the matmuls: module calls, mask and output objects. This step skips them and gives bit-identical
hidden states in float32 (tests/test_engine.py checks this, trees and bfloat16 included, on a tiny Llama).

The math (LLaMA, Touvron et al. 2023, arXiv 2302.13971, Sec. 2), per layer, for the new tokens x:
  h  = x + W_o Attn(RoPE(W_q n1(x) + b_q), RoPE(W_k n1(x) + b_k), W_v n1(x) + b_v)   grouped-query heads
                                                      (Ainslie et al. 2023); the biases b are Qwen2's, else 0
  x' = h + W_down (silu(W_gate n2(h)) * W_up n2(h))                   SwiGLU (Shazeer 2020)
  n(x) = w * x / sqrt(mean(x^2) + eps)                                 RMSNorm (Zhang & Sennrich 2019)
  RoPE rotates each pair (x_i, x_{i+d/2}) of a head by pos * theta^(-2i/d)   (Su et al. 2021, RoFormer)
Keys and values of every layer the step runs go to the same ``DynamicCache`` transformers would use (at the
step's own layer numbers 0, 1, ...: a layer-skip draft's kept layers sit there compacted, so a cache is never
shared with transformers' skipping loop, which keeps the model's numbering), and
:class:`specviz.runtime.protocol.KVCachedSequence` crops it as before. The weights are the shared model's own
parameters, only read, multiplied on the model's own kernel path (:mod:`specviz.runtime.cpu.kernel_paths`). A model
whose layers are all int4 runs each layer in C instead (:mod:`specviz.runtime.cpu.int4_layers`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, PreTrainedConfig, PreTrainedModel

from specviz.runtime.cpu.compiled import Kernels
from specviz.runtime.cpu.int4 import JointInt4, joint_of
from specviz.runtime.cpu.int8 import Int8Embedding
from specviz.runtime.cpu.kernel_paths import Projection
from specviz.runtime.cpu.row_attention import attends_by_rows, rows_attended
from specviz.runtime.loaded import memoised_while_alive


@dataclass(frozen=True)
class LlamaLayer:
    """One decoder layer's weights (views of the model's parameters): projections (out, in) on the model's kernel
    path (Qwen2's q, k and v carry biases), norm gains (H,)."""

    q: Projection
    k: Projection
    v: Projection
    o: Projection
    gate: Projection
    up: Projection
    down: Projection
    attention_norm: torch.Tensor
    mlp_norm: torch.Tensor
    qkv: JointInt4 | None = None  # q, k and v in one int4 call (their buffers laid end to end), or None
    gate_up: JointInt4 | None = None  # gate and up likewise


@dataclass(frozen=True)
class LlamaWeights:
    """What the step reads from a plain Llama: its input embedding (the module: ids (T,) -> (T, H), a float table or
    int8 rows), layers, final norm gain (H,), rotary frequencies theta^(-2i/d) (d/2,) in float32, and the shapes of
    its heads."""

    embedding: nn.Embedding | Int8Embedding
    layers: tuple[LlamaLayer, ...]
    final_norm: torch.Tensor
    inverse_frequencies: torch.Tensor
    eps: float
    heads: int
    kv_heads: int
    head_dim: int
    by_rows: bool  # the model attends one query row at a time (a quantised model: specviz.runtime.cpu.row_attention)
    int4_kernels: Kernels | None = None  # where every layer is int4 (joint q k v, gate up): :func:`int4_layer`'s


DIRECT_MODEL_TYPES = ("llama", "qwen2")  # Qwen2: a Llama with biases on q, k and v (its config names no such flag)


def is_plain_llama(config: PreTrainedConfig) -> bool:
    """A config the step computes exactly: a Llama (or Qwen2) with unscaled rotary embeddings, SiLU, no other
    biases, no sliding window and one tensor-parallel slice. Anything else runs through transformers' own body."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    return (
        getattr(config, "model_type", None) in DIRECT_MODEL_TYPES
        and rope.get("rope_type", rope.get("type", "default")) == "default"
        and getattr(config, "hidden_act", None) == "silu"
        and not getattr(config, "attention_bias", False)
        and not getattr(config, "mlp_bias", False)
        and getattr(config, "pretraining_tp", 1) == 1
        and not getattr(config, "sliding_window", None)
    )


@memoised_while_alive
def llama_weights(model: PreTrainedModel) -> LlamaWeights | None:
    """The model's weights as the step reads them (read once per live model), or None when the model is not a
    plain Llama."""
    inner, config = model.model, model.config
    if not is_plain_llama(config) or getattr(inner.rotary_emb, "attention_scaling", 1.0) != 1.0:
        return None
    layers = tuple(
        LlamaLayer(
            q=Projection.of(layer.self_attn.q_proj),
            k=Projection.of(layer.self_attn.k_proj),
            v=Projection.of(layer.self_attn.v_proj),
            o=Projection.of(layer.self_attn.o_proj),
            gate=Projection.of(layer.mlp.gate_proj),
            up=Projection.of(layer.mlp.up_proj),
            down=Projection.of(layer.mlp.down_proj),
            attention_norm=layer.input_layernorm.weight.detach(),
            mlp_norm=layer.post_attention_layernorm.weight.detach(),
            qkv=joint_of([layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj]),
            gate_up=joint_of([layer.mlp.gate_proj, layer.mlp.up_proj]),
        )
        for layer in inner.layers
    )
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return LlamaWeights(
        embedding=inner.embed_tokens,
        layers=layers,
        final_norm=inner.norm.weight.detach(),
        inverse_frequencies=inner.rotary_emb.inv_freq.detach().float(),
        eps=float(config.rms_norm_eps),
        heads=heads,
        kv_heads=int(config.num_key_value_heads),
        head_dim=head_dim,
        by_rows=attends_by_rows(model),
        int4_kernels=int4_layer_kernels(layers, head_dim),
    )


def int4_layer_kernels(layers: tuple[LlamaLayer, ...], head_dim: int) -> Kernels | None:
    """The kernels :func:`int4_layer` calls, where every layer's products are int4 (q, k and v, and gate and up, each
    in one buffer) and the heads suit the attention kernel; else None."""
    joint = [layer.qkv for layer in layers if layer.qkv and layer.gate_up and layer.o.int4 and layer.down.int4]
    return joint[0].kernel if joint and len(joint) == len(layers) and not head_dim % 16 else None


def rms_norm(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    """gain * x / sqrt(mean(x^2) + eps), the mean square taken in float32 (as Llama's reference code does)."""
    x32 = x.float()
    return gain * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotary_tables(
    inverse_frequencies: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of pos * theta^(-2i/d), each (T, d), the d/2 angles written twice (float32, then ``dtype``)."""
    angles = positions.float()[:, None] * inverse_frequencies[None]  # (T, d/2)
    angles = torch.cat((angles, angles), dim=-1)  # (T, d)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on heads x (1, heads, T, d): (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) for the two halves."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def causal_mask(new: int, cached: int, device: torch.device) -> torch.Tensor | None:
    """(new, cached + new) bool, True where a new token may attend: the cache and itself and the new tokens
    before it. None for a single token, which attends to everything cached."""
    if new == 1:
        return None
    return torch.ones(new, cached + new, dtype=torch.bool, device=device).tril(cached)


def grouped_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor | None
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v over the allowed keys, each key/value head shared by a group of query heads
    (GQA): q (1, heads, T, d), keys and values (1, kv heads, S, d) -> (1, heads, T, d). A CPU reads the
    shared heads in place; on a GPU a masked call with shared heads leaves the fused kernels, so there the
    heads are copied per query head first, as transformers does."""
    scale = q.shape[-1] ** -0.5
    if allowed is not None and q.device.type != "cpu":
        group = q.shape[1] // keys.shape[1]
        keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed, scale=scale)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=allowed, scale=scale, enable_gqa=True)


def llama_layer(
    weights: LlamaWeights,
    layer: LlamaLayer,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    allowed: torch.Tensor | None,
    cache: DynamicCache | None,
    index: int,
) -> torch.Tensor:
    """One decoder layer (the math above) on x (B, T, H) -> (B, T, H); the new keys and values go to ``cache`` at
    layer ``index`` (None: no cache, the T tokens attend among themselves where ``allowed``)."""
    batch, new = x.shape[:2]
    h = rms_norm(x, layer.attention_norm, weights.eps)
    new_q, new_k, new_v = layer.qkv(h) if layer.qkv is not None else (layer.q(h), layer.k(h), layer.v(h))
    # (B, heads, T, d) and (B, kv heads, T, d)
    q = new_q.view(batch, new, weights.heads, weights.head_dim).transpose(1, 2)
    k = new_k.view(batch, new, weights.kv_heads, weights.head_dim).transpose(1, 2)
    v = new_v.view(batch, new, weights.kv_heads, weights.head_dim).transpose(1, 2)
    q, k = rotate(q, cos, sin), rotate(k, cos, sin)
    keys, values = cache.update(k, v, index) if cache is not None else (k, v)  # (B, kv heads, cached + T, d)
    if weights.by_rows:  # (1, T, heads, d)
        mask = allowed[None, None] if allowed is not None else None
        attended = rows_attended(q, keys, values, mask, weights.head_dim**-0.5)
    else:
        attended = grouped_attention(q, keys, values, allowed).transpose(1, 2)  # (B, T, heads, d)
    x = x + layer.o(attended.reshape(batch, new, weights.heads * weights.head_dim))
    h = rms_norm(x, layer.mlp_norm, weights.eps)
    gate, up = layer.gate_up(h) if layer.gate_up is not None else (layer.gate(h), layer.up(h))
    return x + layer.down(F.silu(gate) * up)


# A stack of decoder layers: (weights, x (1, T, H), cos, sin (T, d), allowed (T, cached + T) or None, cache) ->
# x (1, T, H), every layer's keys and values appended to the cache
LayersFn = Callable[
    [LlamaWeights, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, DynamicCache], torch.Tensor
]


def llama_layers(
    weights: LlamaWeights,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    allowed: torch.Tensor | None,
    cache: DynamicCache,
) -> torch.Tensor:
    """Every decoder layer of ``weights`` in turn (:func:`llama_layer`), the torch reference's."""
    for index, layer in enumerate(weights.layers):
        x = llama_layer(weights, layer, x, cos, sin, allowed, cache, index)
    return x


def llama_hidden(
    weights: LlamaWeights,
    ids: torch.Tensor,
    positions: torch.Tensor,
    allowed: torch.Tensor | None,
    cache: DynamicCache,
    n_last: int,
    layers: LayersFn = llama_layers,
) -> torch.Tensor:
    """Final normed hidden states (n_last, H) of the last ``n_last`` of the new tokens ``ids`` (T,) at
    ``positions`` (T,), each attending where ``allowed`` (T, cached + T) is True (None: everything cached);
    every layer's keys and values are appended to ``cache``. The layers run through ``layers``: the torch
    reference's, or an int4 model's in C (:func:`~specviz.runtime.cpu.int4_layers.int4_layers`)."""
    x = weights.embedding(ids)[None]  # (1, T, H)
    cos, sin = rotary_tables(weights.inverse_frequencies, positions, x.dtype)  # (T, d) each
    x = layers(weights, x, cos, sin, allowed, cache)
    return rms_norm(x[0, -n_last:], weights.final_norm, weights.eps)  # (n_last, H)
