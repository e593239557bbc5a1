"""The reference forwards, in torch on any device: the full model (:func:`full_forward`), the same plus the target's
hidden states for drafters on them (:func:`states_forward`), and the direct Llama body they share with a draft's
(:mod:`specviz.runtime.draft_forward`) and the layer-skip self-draft's (:mod:`specviz.runtime.skipping_forward`).
A quantised model's full passes take the direct Llama body too (:func:`direct_body_weights`), whose products the CPU
runtime (:mod:`specviz.runtime.cpu`) computes.

Every forward follows :mod:`specviz.runtime.protocol`: ``forward(loaded, new_ids, cache, cached, n_last,
layout=None) -> logits (n_last, V)``. The shared models are only read.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from specviz.runtime.cpu.int4_layers import int4_layers
from specviz.runtime.cpu.row_attention import attends_by_rows
from specviz.runtime.llama_step import LlamaWeights, causal_mask, llama_hidden, llama_layers, llama_weights
from specviz.runtime.loaded import LoadedModel
from specviz.runtime.protocol import SequenceCache, TreeLayout, takes_static_cache
from specviz.runtime.static_passes import StaticCache


def _inputs(loaded: LoadedModel, new_ids: list[int], layout: TreeLayout | None) -> dict[str, torch.Tensor]:
    """Model inputs for new tokens: a causal continuation of the cache, or placed by a tree layout."""
    inputs = dict(input_ids=torch.tensor([new_ids], device=loaded.device))  # (1, T)
    if layout is not None:
        inputs.update(
            attention_mask=layout.additive_mask(loaded.model.dtype, loaded.device),
            position_ids=torch.tensor([layout.positions], device=loaded.device),
        )
    return inputs


def direct_body_weights(loaded: LoadedModel) -> LlamaWeights | None:
    """The direct Llama body's weights where a model's full passes take it: a plain Llama (or Qwen2) that attends one
    query row at a time, as a quantised model does. There the direct Llama body computes transformers' own bits, every
    row of every pass (tests/test_quantised_targets.py), without transformers' per-layer Python: an int8 model's
    products are its own layers, attention the same :func:`~specviz.runtime.cpu.row_attention.rows_attended`, the norms
    and rotations the same operations; an int4 model's layers are :func:`~specviz.runtime.cpu.int4_layers.int4_layer`
    in both (transformers' decoder layers call it: :class:`~specviz.runtime.cpu.int4_layers.Int4DecoderLayer`). The
    target alone, the speculative run and the profile all run it, and transformers' ``generate`` on the same model
    gives the same tokens. A float model's passes stay transformers' own: there ``generate`` is the peer measured
    beside the app, on the same passes."""
    if not attends_by_rows(loaded.model):  # asked first: a float model's weights are not read (nor kept) here
        return None
    return llama_weights(loaded.model)


@takes_static_cache
def full_forward(
    loaded: LoadedModel,
    new_ids: list[int],
    cache: SequenceCache,
    cached: int,
    n_last: int,
    layout: TreeLayout | None = None,
) -> torch.Tensor:
    """Logits (n_last, V) of the last ``n_last`` positions after feeding ``new_ids`` to the cached model (over a static
    cache: :meth:`~specviz.runtime.static_passes.StaticPasses.run`, the whole head)."""
    if isinstance(cache, StaticCache):
        return cache.passes.run(cache, new_ids, cached, n_last, layout)[0]
    weights = direct_body_weights(loaded)
    with loaded.lock, torch.inference_mode():
        if weights is not None:
            hidden = model_body(loaded, weights, new_ids, cache, cached, n_last, layout)  # (n_last, H)
            return loaded.model.get_output_embeddings()(hidden)
        out = loaded.model(
            **_inputs(loaded, new_ids, layout), past_key_values=cache, use_cache=True, logits_to_keep=n_last
        )
    return out.logits[0]  # (n_last, V)


def new_positions(layout: TreeLayout | None, cached: int, count: int, device: torch.device) -> torch.Tensor:
    """Position ids (T,) of the new tokens: where a tree layout puts them, else the next ``count`` after the cache."""
    if layout is not None:
        return torch.tensor(layout.positions, device=device)
    return torch.arange(cached, cached + count, device=device)


def model_body(
    loaded: LoadedModel,
    weights: LlamaWeights | None,
    new_ids: list[int],
    cache: DynamicCache,
    cached: int,
    n_last: int,
    layout: TreeLayout | None = None,
) -> torch.Tensor:
    """Final normed hidden states (n_last, H) of the last ``n_last`` new tokens: a plain Llama (its
    :func:`~specviz.runtime.llama_step.llama_weights`) through :mod:`specviz.runtime.llama_step`, the same numbers
    without transformers' per-layer Python; any other model (``weights`` None) through transformers' own body."""
    if weights is None:
        return loaded.model.model(
            **_inputs(loaded, new_ids, layout), past_key_values=cache, use_cache=True
        ).last_hidden_state[0, -n_last:]
    ids = torch.tensor(new_ids, device=loaded.device)  # (T,)
    positions = new_positions(layout, cached, len(new_ids), loaded.device)  # (T,)
    allowed = layout.allowed.to(loaded.device) if layout else causal_mask(len(new_ids), cached, loaded.device)
    layers = int4_layers if weights.int4_kernels is not None else llama_layers
    return llama_hidden(weights, ids, positions, allowed, cache, n_last, layers)


@takes_static_cache
def states_forward(
    loaded: LoadedModel,
    new_ids: list[int],
    cache: SequenceCache,
    cached: int,
    n_last: int,
    layout: TreeLayout | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`full_forward`, plus the final (normed) hidden state of every new token: (logits, (T, H)), a tree's
    nodes included. Parallel drafters and EAGLE read these states; the target's body runs once either way."""
    if isinstance(cache, StaticCache):
        logits, hidden = cache.passes.run(cache, new_ids, cached, n_last, layout, states=True)
        return logits, hidden
    with loaded.lock, torch.inference_mode():
        # (T, H): the body of the target's full passes
        hidden = model_body(loaded, direct_body_weights(loaded), new_ids, cache, cached, len(new_ids), layout)
        logits = loaded.model.get_output_embeddings()(hidden[-n_last:])  # (n_last, V)
    return logits, hidden
