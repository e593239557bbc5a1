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
:class:`specviz.models.forwards.KVCachedSequence` crops it as before. The weights are the shared model's own
parameters, only read, multiplied on the model's own kernel path (:mod:`specviz.models.kernels`). A model whose
layers are all int4 runs each layer in two calls of ``int4_layer.c`` instead (:func:`int4_layer`: the same math, its
norms summed by the package), in every pass: the lean step's and transformers' own forward (its decoder layers are
:class:`Int4DecoderLayer`), so ``generate`` and the engine compute the same bits, and a pass over k rows those of k
one-row steps (each row computed alone): an int4 target stays exact to itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, PreTrainedConfig, PreTrainedModel

from specviz.models.compiled import Kernels
from specviz.models.int4 import JointInt4, joint_of, quantize_int4
from specviz.models.int8 import Int8Embedding
from specviz.models.kernels import Projection
from specviz.models.memo import memoised_while_alive
from specviz.models.row_attention import attends_by_rows, keys_seen, rows_attended


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
    by_rows: bool  # the model attends one query row at a time (a quantised model: specviz.models.row_attention)
    int4_kernels: Kernels | None = None  # where every layer is int4 (joint q k v, gate up): :func:`int4_layer`'s


LEAN_MODEL_TYPES = ("llama", "qwen2")  # Qwen2: a Llama with biases on q, k and v (its config names no such flag)


def is_plain_llama(config: PreTrainedConfig) -> bool:
    """A config the step computes exactly: a Llama (or Qwen2) with unscaled rotary embeddings, SiLU, no other
    biases, no sliding window and one tensor-parallel slice. Anything else runs through transformers' own body."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    return (
        getattr(config, "model_type", None) in LEAN_MODEL_TYPES
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


def llama_hidden(
    weights: LlamaWeights,
    ids: torch.Tensor,
    positions: torch.Tensor,
    allowed: torch.Tensor | None,
    cache: DynamicCache,
    n_last: int,
) -> torch.Tensor:
    """Final normed hidden states (n_last, H) of the last ``n_last`` of the new tokens ``ids`` (T,) at
    ``positions`` (T,), each attending where ``allowed`` (T, cached + T) is True (None: everything cached);
    every layer's keys and values are appended to ``cache``. An int4 model's layers are :func:`int4_layer`'s."""
    x = weights.embedding(ids)[None]  # (1, T, H)
    cos, sin = rotary_tables(weights.inverse_frequencies, positions, x.dtype)  # (T, d) each
    if weights.int4_kernels is not None:
        x = x.float().contiguous()  # a tensor of this pass's own: each int4_layer adds to it in place
        keys = allowed.shape[-1] if allowed is not None else int(cache.get_seq_length()) + len(ids)
        counts, indices = keys_seen(allowed[None, None] if allowed is not None else None, len(ids), keys)
        for index, layer in enumerate(weights.layers):
            x = int4_layer(weights, layer, x, cos, sin, counts, indices, cache, index)
    else:
        for index, layer in enumerate(weights.layers):
            x = llama_layer(weights, layer, x, cos, sin, allowed, cache, index)
    return rms_norm(x[0, -n_last:], weights.final_norm, weights.eps)  # (n_last, H)


def int4_layer(
    weights: LlamaWeights,
    layer: LlamaLayer,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    counts: torch.Tensor,
    indices: torch.Tensor | None,
    cache: DynamicCache | None,
    index: int,
) -> torch.Tensor:
    """:func:`llama_layer` on int4 weights (x (1, T, H) float32, updated in place), in two calls of ``int4_layer.c``
    (``weights.int4_kernels``) around the cache's update: norm, q k v and RoPE; then attention (row by row, as
    :mod:`specviz.models.row_attention`), o, norm and the SwiGLU MLP. Rows see the keys ``counts`` and ``indices``
    say (:func:`~specviz.models.row_attention.keys_seen`); without a cache, the new rows' own keys."""
    kernels = weights.int4_kernels
    assert kernels and layer.qkv is not None and layer.gate_up is not None and layer.o.int4 and layer.down.int4
    rows, hidden, heads, kv_heads, d = x.shape[1], x.shape[2], weights.heads, weights.kv_heads, weights.head_dim
    q, k, v = torch.empty(heads, rows, d), torch.empty(1, kv_heads, rows, d), torch.empty(1, kv_heads, rows, d)
    qkv, qkv_bias = layer.qkv.addresses
    if kernels.layer_in(
        x.data_ptr(), rows, hidden, layer.attention_norm.data_ptr(), weights.eps, qkv, qkv_bias, heads, kv_heads, d,
        cos.data_ptr(), sin.data_ptr(), q.data_ptr(), k.data_ptr(), v.data_ptr(),
    ):  # fmt: skip
        raise MemoryError("an int4 layer could not allocate its rows")
    keys, values = (t[0].contiguous() for t in (cache.update(k, v, index) if cache is not None else (k, v)))
    (o, o_bias), (gate_up, gate_up_bias), (down, down_bias) = (
        layer.o.int4.addresses, layer.gate_up.addresses, layer.down.int4.addresses,
    )  # fmt: skip
    if kernels.layer_out(
        x.data_ptr(), rows, hidden, q.data_ptr(), heads, d, keys.data_ptr(), values.data_ptr(), kv_heads,
        keys.shape[1], counts.data_ptr(), None if indices is None else indices.data_ptr(), d**-0.5, o, o_bias,
        layer.mlp_norm.data_ptr(), weights.eps, gate_up, gate_up_bias, layer.gate_up.outputs[0], down, down_bias,
    ):  # fmt: skip
        raise MemoryError("an int4 layer could not allocate its rows")
    return x


class Int4DecoderLayer(nn.Module):
    """A decoder layer of a model whose every layer is int4, as transformers' own forward (``generate``) calls it:
    :func:`int4_layer` on its weights, so transformers and the lean step compute one model's bits. It holds the
    layer's own modules under their own names (the weights stay where transformers and :func:`llama_weights` find
    them); the rotary angles are those transformers passes (``position_embeddings``), the keys each row sees read off
    its attention mask (:func:`~specviz.models.row_attention.keys_seen`)."""

    def __init__(self, layer: nn.Module, weights: LlamaWeights, index: int) -> None:
        super().__init__()
        self.self_attn, self.mlp = layer.self_attn, layer.mlp
        self.input_layernorm, self.post_attention_layernorm = layer.input_layernorm, layer.post_attention_layernorm
        self.weights, self.index = weights, index

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        past_key_values: DynamicCache | None = None,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **_: object,
    ) -> torch.Tensor:
        assert position_embeddings is not None and hidden_states.shape[0] == 1, "one sequence, its rotary angles given"
        rows = hidden_states.shape[1]
        cached = int(past_key_values.get_seq_length(self.index)) if past_key_values is not None else 0
        counts, indices = keys_seen(attention_mask, rows, cached + rows)
        cos, sin = (t[0].float().contiguous() for t in position_embeddings)  # (T, d) each
        x = hidden_states.float().clone(memory_format=torch.contiguous_format)  # added to in place; the caller's kept
        layer = self.weights.layers[self.index]
        return int4_layer(self.weights, layer, x, cos, sin, counts, indices, past_key_values, self.index)


def run_int4_layers_in_c(model: PreTrainedModel) -> None:
    """Make every decoder layer of a freshly quantised model whose every layer is int4 an :class:`Int4DecoderLayer`
    (in place, before the model is shared); a model the step does not compute, or with a layer the kernel cannot
    take, keeps transformers' layers."""
    weights = llama_weights(model)
    if weights is None or weights.int4_kernels is None:
        return
    layers = model.model.layers
    for index, layer in enumerate(layers):
        layers[index] = Int4DecoderLayer(layer, weights, index)


def quantize_int4_model(model: nn.Module) -> int:
    """The int4 precision as loaded: :func:`~specviz.models.int4.quantize_int4`, then (a transformers model)
    :func:`run_int4_layers_in_c`. Returns how many Linear layers changed."""
    changed = quantize_int4(model)
    if isinstance(model, PreTrainedModel):
        run_int4_layers_in_c(model)
    return changed
