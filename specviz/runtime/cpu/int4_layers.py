"""An int4 model's decoder layers in C: each layer in two calls of ``int4_layer.c`` around the cache's update
(:func:`int4_layer`: the math of :mod:`specviz.runtime.llama_step`, its norms summed by the package), in every pass:
the direct Llama body's (:func:`int4_layers`) and transformers' own forward (its decoder layers become
:class:`Int4DecoderLayer`), so ``generate`` and the engine compute the same bits, and a pass over k rows those of k
one-row steps (each row computed alone): an int4 target is batch-invariant.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache, PreTrainedModel

from specviz.runtime.cpu.compiled import Int4LayerArgs, address
from specviz.runtime.cpu.int4 import quantize_int4
from specviz.runtime.cpu.row_attention import check_keys_seen, keys_seen, seen_addresses
from specviz.runtime.llama_step import LlamaLayer, LlamaWeights, llama_weights


def int4_layers(
    weights: LlamaWeights,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    allowed: torch.Tensor | None,
    cache: DynamicCache,
) -> torch.Tensor:
    """:func:`~specviz.runtime.llama_step.llama_layers` for a model whose every layer is int4 (its
    ``weights.int4_kernels`` set): each layer :func:`int4_layer`, on a float32 copy of ``x`` the layers add to in
    place, the keys each row sees read off ``allowed`` (:func:`~specviz.runtime.cpu.row_attention.keys_seen`)."""
    rows = x.shape[1]
    x = x.float().contiguous()  # (1, T, H), this pass's own: each layer adds to it in place
    keys = allowed.shape[-1] if allowed is not None else int(cache.get_seq_length()) + rows
    counts, indices = keys_seen(allowed[None, None] if allowed is not None else None, rows, keys)
    check_keys_seen(counts, indices, keys)  # once for every layer of the pass
    for index, layer in enumerate(weights.layers):
        x = int4_layer(weights, layer, x, cos, sin, counts, indices, cache, index)
    return x


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
    :mod:`specviz.runtime.cpu.row_attention`), o, norm and the SwiGLU MLP. Rows see the keys ``counts`` and ``indices``
    say (:func:`~specviz.runtime.cpu.row_attention.keys_seen`, their values checked by the caller:
    :func:`~specviz.runtime.cpu.row_attention.check_keys_seen`); without a cache, the new rows' own keys."""
    kernels = weights.int4_kernels
    assert kernels
    rows, heads, kv_heads, d = x.shape[1], weights.heads, weights.kv_heads, weights.head_dim
    q, k, v = torch.empty(heads, rows, d), torch.empty(1, kv_heads, rows, d), torch.empty(1, kv_heads, rows, d)
    args = layer_args(weights, layer, x, cos, sin, (q, k, v))
    if kernels.layer_in(args):
        raise MemoryError("an int4 layer could not allocate its rows")
    keys, values = (t[0].contiguous() for t in (cache.update(k, v, index) if cache is not None else (k, v)))
    n_keys = keys.shape[1]
    args.keys = address("keys", keys, (kv_heads, n_keys, d))
    args.values = address("values", values, (kv_heads, n_keys, d))
    args.n_keys, args.scale = n_keys, d**-0.5
    args.seen_count, args.seen_index = seen_addresses(counts, indices, rows, n_keys)
    if kernels.layer_out(args):
        raise MemoryError("an int4 layer could not allocate its rows")
    return x


def layer_args(
    weights: LlamaWeights,
    layer: LlamaLayer,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    qkv_out: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
) -> Int4LayerArgs:
    """An int4 layer's ``struct int4_layer_args`` but for the keys its rows attend (:func:`int4_layer` sets those
    once the cache holds the rows' own): x (1, T, H) float32, cos and sin (T, d), q (heads, T, d), k and v (1, kv
    heads, T, d) to write, and the layer's weights (its int4 products' addresses, read once at conversion, and its
    norms' gains (H,))."""
    assert layer.qkv is not None and layer.gate_up is not None and layer.o.int4 and layer.down.int4
    rows, hidden, heads, kv_heads, d = x.shape[1], x.shape[2], weights.heads, weights.kv_heads, weights.head_dim
    q, k, v = qkv_out
    (qkv, qkv_bias), (gate_up, gate_up_bias) = layer.qkv.addresses, layer.gate_up.addresses
    (o, o_bias), (down, down_bias) = layer.o.int4.addresses, layer.down.int4.addresses
    return Int4LayerArgs(
        x=address("x", x, (1, rows, hidden)),
        rows=rows,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        d=d,
        eps=weights.eps,
        attention_norm=address("attention_norm", layer.attention_norm, (hidden,)),
        qkv=qkv,
        qkv_bias=qkv_bias,
        cos=address("cos", cos, (rows, d)),
        sin=address("sin", sin, (rows, d)),
        q=address("q", q, (heads, rows, d)),
        k=address("k", k, (1, kv_heads, rows, d)),
        v=address("v", v, (1, kv_heads, rows, d)),
        o=o,
        o_bias=o_bias,
        mlp_norm=address("mlp_norm", layer.mlp_norm, (hidden,)),
        gate_up=gate_up,
        gate_up_bias=gate_up_bias,
        intermediate=layer.gate_up.outputs[0],
        down=down,
        down_bias=down_bias,
    )


class Int4DecoderLayer(nn.Module):
    """A decoder layer of a model whose every layer is int4, as transformers' own forward (``generate``) calls it:
    :func:`int4_layer` on its weights, so transformers and the direct Llama step compute one model's bits. It holds the
    layer's own modules under their own names (the weights stay where transformers and :func:`llama_weights` find
    them); the rotary angles are those transformers passes (``position_embeddings``), the keys each row sees read off
    its attention mask (:func:`~specviz.runtime.cpu.row_attention.keys_seen`)."""

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
        check_keys_seen(counts, indices, cached + rows)
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
    """The int4 precision as loaded: :func:`~specviz.runtime.cpu.int4.quantize_int4`, then (a transformers model)
    :func:`run_int4_layers_in_c`. Returns how many Linear layers changed."""
    changed = quantize_int4(model)
    if isinstance(model, PreTrainedModel):
        run_int4_layers_in_c(model)
    return changed
