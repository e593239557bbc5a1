"""Forward passes with a KV cache: the full model, a draft model (lean Llama body, FR-Spec trimmed head),
the target's hidden states (for parallel drafters), and tree-shaped inputs; the layer-skip self-draft's is
:mod:`specviz.models.skipping_forward`'s. A quantised model's full passes take the lean body too
(:func:`lean_weights_of_own_bits`).

Every forward has one signature, ``forward(model, new_ids, cache, cached, n_last, layout=None) ->
logits (n_last, V)``, so drafters, the verification pass and trees run any of them through
:class:`KVCachedSequence`, which keeps one sequence's cache in step with its committed tokens.
The shared models are only read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import CacheLayerMixin

from specviz.models.llama_step import LlamaWeights, causal_mask, llama_hidden, llama_weights
from specviz.models.loaded import LoadedModel
from specviz.models.row_attention import attends_by_rows
from specviz.token_lists import common_prefix


@dataclass(frozen=True)
class TreeLayout:
    """Where new tokens sit when they are not a plain continuation (tree attention, Miao et al. 2023;
    Jeon et al. 2024): each new token's position id and the cached-or-new tokens it may attend to."""

    positions: list[int]  # position id of each new token
    allowed: torch.Tensor  # (new, cached + new) bool: True where the new token may attend

    def additive_mask(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """The (1, 1, new, cached + new) float mask the attention adds to its scores: 0 or the dtype's minimum."""
        mask = torch.zeros(self.allowed.shape, dtype=dtype, device=device)
        mask.masked_fill_(~self.allowed.to(device), torch.finfo(dtype).min)
        return mask[None, None]


# A forward function: (model, new token ids, cache, tokens already cached, logits wanted, tree layout or None)
# -> logits (n_last, V). Without a layout the new tokens are a causal continuation of the cache.
ForwardFn = Callable[[LoadedModel, list[int], DynamicCache, int, int, TreeLayout | None], torch.Tensor]
# A forward that also returns the final hidden states of the new tokens: (logits, (T, H)) (:func:`states_forward`)
StatesForwardFn = Callable[
    [LoadedModel, list[int], DynamicCache, int, int, TreeLayout | None], tuple[torch.Tensor, torch.Tensor]
]


def _inputs(loaded: LoadedModel, new_ids: list[int], layout: TreeLayout | None) -> dict[str, torch.Tensor]:
    """Model inputs for new tokens: a causal continuation of the cache, or placed by a tree layout."""
    inputs = dict(input_ids=torch.tensor([new_ids], device=loaded.device))  # (1, T)
    if layout is not None:
        inputs.update(
            attention_mask=layout.additive_mask(loaded.model.dtype, loaded.device),
            position_ids=torch.tensor([layout.positions], device=loaded.device),
        )
    return inputs


def lean_weights_of_own_bits(loaded: LoadedModel) -> LlamaWeights | None:
    """The lean body's weights where a model's full passes take it: a plain Llama (or Qwen2) that attends one query
    row at a time, as a quantised model does. There the lean body computes transformers' own bits, every row of every
    pass (tests/test_quantised_targets.py), without transformers' per-layer Python: an int8 model's products are its
    own layers, attention the same :func:`~specviz.models.row_attention.rows_attended`, the norms and rotations the
    same operations; an int4 model's layers are :func:`~specviz.models.llama_step.int4_layer` in both (transformers'
    decoder layers call it: :class:`~specviz.models.llama_step.Int4DecoderLayer`). The target alone, the speculative
    run and the profile all run it, and transformers' ``generate`` on the same model gives the same tokens. A float
    model's passes stay transformers' own: there ``generate`` is the peer measured beside the app, on the same
    passes."""
    if not attends_by_rows(loaded.model):  # asked first: a float model's weights are not read (nor kept) here
        return None
    return llama_weights(loaded.model)


def full_forward(
    loaded: LoadedModel,
    new_ids: list[int],
    cache: DynamicCache,
    cached: int,
    n_last: int,
    layout: TreeLayout | None = None,
) -> torch.Tensor:
    """Logits (n_last, V) of the last ``n_last`` positions after feeding ``new_ids`` to the cached model."""
    weights = lean_weights_of_own_bits(loaded)
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
    :func:`~specviz.models.llama_step.llama_weights`) through :mod:`specviz.models.llama_step`, the same numbers without
    transformers' per-layer Python; any other model (``weights`` None) through transformers' own body."""
    if weights is None:
        return loaded.model.model(
            **_inputs(loaded, new_ids, layout), past_key_values=cache, use_cache=True
        ).last_hidden_state[0, -n_last:]
    ids = torch.tensor(new_ids, device=loaded.device)  # (T,)
    positions = new_positions(layout, cached, len(new_ids), loaded.device)  # (T,)
    allowed = layout.allowed.to(loaded.device) if layout else causal_mask(len(new_ids), cached, loaded.device)
    return llama_hidden(weights, ids, positions, allowed, cache, n_last)


def states_forward(
    loaded: LoadedModel,
    new_ids: list[int],
    cache: DynamicCache,
    cached: int,
    n_last: int,
    layout: TreeLayout | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`full_forward`, plus the final (normed) hidden state of every new token: (logits, (T, H)), a tree's
    nodes included. Parallel drafters and EAGLE read these states; the target's body runs once either way."""
    with loaded.lock, torch.inference_mode():
        # (T, H): the body of the target's full passes
        hidden = model_body(loaded, lean_weights_of_own_bits(loaded), new_ids, cache, cached, len(new_ids), layout)
        logits = loaded.model.get_output_embeddings()(hidden[-n_last:])  # (n_last, V)
    return logits, hidden


class KVCachedSequence:
    """A KV cache plus the token ids it holds, cropped back to what is still valid.

    ``pending(context)`` crops the cache to the longest prefix shared with ``context`` (keeping at
    least one token un-cached, whose logits are wanted) and returns the tokens still to feed.
    Accepted tokens are therefore never recomputed; rejected ones are dropped.

    The cache keeps every position in every layer, even for sliding-window models (Mistral, Gemma 2/3,
    Phi-3): a sliding cache layer cannot be cropped, and the model applies its window in the mask.
    """

    def __init__(self) -> None:
        self.cache = DynamicCache()  # full layers only (no model config given): croppable, see above
        self.ids: list[int] = []
        self.states: torch.Tensor | None = None  # (cached, H) final hidden states, when the forward returns them

    def pending(self, context: list[int]) -> list[int]:
        keep = common_prefix(self.ids, context[:-1])
        self.crop(keep)
        return context[keep:]

    def crop(self, keep: int) -> None:
        """Keep the first ``keep`` cache entries (and ids, states): also entries fed past ``ids``, as a drafter's
        own speculative rows are."""
        if self.cache.get_seq_length() > keep:
            self.cache.crop(keep - self.cache.get_seq_length())  # negative: number of trailing entries to drop
        self.ids = self.ids[:keep]
        self.states = self.states[:keep] if self.states is not None else None

    def feed(
        self,
        forward: ForwardFn | StatesForwardFn,
        loaded: LoadedModel,
        new_ids: list[int],
        n_last: int,
        layout: TreeLayout | None = None,
    ) -> torch.Tensor:
        logits = forward(loaded, new_ids, self.cache, len(self.ids), n_last, layout)
        if isinstance(logits, tuple):  # a forward that also returns the final hidden states
            logits, states = logits
            self.states = states if self.states is None else torch.cat([self.states[: len(self.ids)], states])
        self.ids.extend(new_ids)
        return logits

    def keep(self, indices: list[int]) -> None:
        """Keep only the cache entries at ``indices`` (in order): after a tree pass, the committed
        prefix and the accepted path, so accepted tokens are not recomputed next round."""
        index = torch.tensor(indices, dtype=torch.long)
        for layer in self.cache.layers:
            assert isinstance(layer, CacheLayerMixin), "a cache made without a model config holds key-value layers"
            keys, values = layer.keys, layer.values
            if layer.is_initialized and keys is not None and values is not None and keys.numel():
                layer.keys = keys.index_select(-2, index.to(keys.device))
                layer.values = values.index_select(-2, index.to(values.device))
        self.ids = [self.ids[i] for i in indices]
        if self.states is not None:
            self.states = self.states[index.to(self.states.device)]
