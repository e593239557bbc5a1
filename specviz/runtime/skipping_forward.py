"""The layer-skip self-draft's forward: the target with some decoder layers left out, run through our own loop
over the kept layers (the shared model is only read), and the attention kinds a mask of our own must respect (a
sliding window; sliding and full layers mixed), which the tree drafter checks too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from transformers import DynamicCache, PreTrainedConfig
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

from specviz.runtime.llama_step import llama_weights
from specviz.runtime.loaded import LoadedModel
from specviz.runtime.protocol import ForwardFn, SequenceCache, TreeLayout
from specviz.runtime.reference import model_body, new_positions

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask


def layer_skip_forward(skip: frozenset[int]) -> ForwardFn:
    """A forward function that runs the model with the decoder layers in ``skip`` left out.

    Draft & Verify (Zhang et al. 2023, Sec. 3.1): the draft is the target minus a subset of its
    layers, so no extra weights and the same vocabulary. Skipped layers get no KV entries; the other
    layers keep theirs in the drafter's own cache (layer 0 and the last layer are never skipped).
    A plain Llama's kept layers run through :func:`model_body`'s direct Llama step (bit-identical to
    transformers' layers, with less Python around the matmuls), any other model's through its own decoder
    layers; then the model's output head. The two number the cache's layers differently (the kept layers
    compacted, or the model's own numbers), and a model always takes the same one.
    """

    def forward(
        loaded: LoadedModel,
        new_ids: list[int],
        cache: SequenceCache,
        cached: int,
        n_last: int,
        layout: TreeLayout | None = None,
    ) -> torch.Tensor:
        assert isinstance(cache, DynamicCache), "a layer-skip draft grows its own cache (takes no static one)"
        weights = llama_weights(loaded.model)
        with loaded.lock, torch.inference_mode():
            if weights is None:
                hidden = skipping_body(loaded, skip, new_ids, cache, cached, n_last, layout)
            else:
                kept = tuple(layer for index, layer in enumerate(weights.layers) if index not in skip)
                hidden = model_body(loaded, replace(weights, layers=kept), new_ids, cache, cached, n_last, layout)
            return loaded.model.lm_head(hidden)  # (n_last, V)

    return forward


def skipping_body(
    loaded: LoadedModel,
    skip: frozenset[int],
    new_ids: list[int],
    cache: DynamicCache,
    cached: int,
    n_last: int,
    layout: TreeLayout | None = None,
) -> torch.Tensor:
    """Final normed hidden states (n_last, H) through transformers' own decoder layers, those in ``skip`` left out."""
    inner = loaded.model.model
    ids = torch.tensor([new_ids], device=loaded.device)  # (1, T)
    position_ids = new_positions(layout, cached, len(new_ids), loaded.device)[None]  # (1, T)
    hidden = inner.embed_tokens(ids)  # (1, T, H)
    mask: torch.Tensor | BlockMask | None  # transformers' masks: a tensor, a flex-attention block mask or none
    if layout is not None:
        mask = layout.additive_mask(hidden.dtype, loaded.device)
    else:
        make_mask = create_sliding_window_causal_mask if sliding_window(inner.config) else create_causal_mask
        mask = make_mask(
            config=inner.config,
            inputs_embeds=hidden,
            attention_mask=None,
            past_key_values=cache,
            position_ids=position_ids,
        )
    position_embeddings = inner.rotary_emb(hidden, position_ids=position_ids)
    for index, layer in enumerate(inner.layers):
        if index not in skip:
            hidden = layer(
                hidden,
                attention_mask=mask,
                position_embeddings=position_embeddings,
                position_ids=position_ids,
                past_key_values=cache,
                use_cache=True,
            )
    return inner.norm(hidden[0, -n_last:])  # (n_last, H)


def sliding_window(config: PreTrainedConfig) -> int | None:
    """The attention window of a model whose layers only see their last W positions (Mistral-style), else None."""
    return getattr(config, "sliding_window", None) or None


def has_mixed_attention(config: PreTrainedConfig) -> bool:
    """Layers of different attention kinds (Gemma 2/3: sliding and full layers alternate)."""
    return len(set(getattr(config, "layer_types", None) or ())) > 1
