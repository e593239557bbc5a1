"""Forward passes with a KV cache: the full model, a draft model (lean Llama body, FR-Spec trimmed head),
the target's hidden states (for parallel drafters), the layer-skip self-draft, and tree-shaped inputs.

Every forward has one signature, ``forward(model, new_ids, cache, cached, n_last, layout=None) ->
logits (n_last, V)``, so drafters, the verification pass and trees run any of them through
:class:`KVCachedSequence`, which keeps one sequence's cache in step with its committed tokens.
The shared models are only read: layer skipping is our own loop over the decoder layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch
from transformers import DynamicCache
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

from specviz.models.kernels import Projection
from specviz.models.llama_step import LlamaWeights, causal_mask, llama_hidden, llama_weights
from specviz.models.loaded import LoadedModel
from specviz.models.memo import memoised_while_alive

# A forward function: (model, new token ids, cache, tokens already cached, logits wanted, tree layout or None)
# -> logits (n_last, V). Without a layout the new tokens are a causal continuation of the cache.
ForwardFn = Callable[..., torch.Tensor]


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


def _inputs(loaded: LoadedModel, new_ids: list[int], layout: TreeLayout | None) -> dict:
    """Model inputs for new tokens: a causal continuation of the cache, or placed by a tree layout."""
    inputs = dict(input_ids=torch.tensor([new_ids], device=loaded.device))  # (1, T)
    if layout is not None:
        inputs.update(attention_mask=layout.additive_mask(loaded.model.dtype, loaded.device),
                      position_ids=torch.tensor([layout.positions], device=loaded.device))
    return inputs


def full_forward(loaded: LoadedModel, new_ids: list[int], cache: DynamicCache, cached: int, n_last: int,
                 layout: TreeLayout | None = None) -> torch.Tensor:
    """Logits (n_last, V) of the last ``n_last`` positions after feeding ``new_ids`` to the cached model."""
    with loaded.lock, torch.inference_mode():
        out = loaded.model(**_inputs(loaded, new_ids, layout), past_key_values=cache, use_cache=True,
                           logits_to_keep=n_last)
    return out.logits[0]  # (n_last, V)


@memoised_while_alive
def trimmed_head(loaded: LoadedModel, k: int) -> tuple[torch.Tensor, Projection]:
    """The draft's K most frequent token ids (K,) and the projection onto their rows of its output head (K, H), on
    the draft's kernel path, made once per live draft."""
    ids = loaded.vocab_ranking.order[:k].to(loaded.device)
    return ids, Projection.of(loaded.model.get_output_embeddings()).rows(ids)


def new_positions(layout: TreeLayout | None, cached: int, count: int, device: torch.device) -> torch.Tensor:
    """Position ids (T,) of the new tokens: where a tree layout puts them, else the next ``count`` after the cache."""
    if layout is not None:
        return torch.tensor(layout.positions, device=device)
    return torch.arange(cached, cached + count, device=device)


def model_body(loaded: LoadedModel, weights: LlamaWeights | None, new_ids: list[int], cache: DynamicCache, cached: int,
               n_last: int, layout: TreeLayout | None = None) -> torch.Tensor:
    """Final normed hidden states (n_last, H) of the last ``n_last`` new tokens: a plain Llama (its
    :func:`~specviz.models.llama_step.llama_weights`) through :mod:`specviz.models.llama_step`, the same numbers without
    transformers' per-layer Python; any other model (``weights`` None) through transformers' own body."""
    if weights is None:
        return loaded.model.model(**_inputs(loaded, new_ids, layout), past_key_values=cache,
                                  use_cache=True).last_hidden_state[0, -n_last:]
    ids = torch.tensor(new_ids, device=loaded.device)  # (T,)
    positions = new_positions(layout, cached, len(new_ids), loaded.device)  # (T,)
    allowed = layout.allowed.to(loaded.device) if layout else causal_mask(len(new_ids), cached, loaded.device)
    return llama_hidden(weights, ids, positions, allowed, cache, n_last)


def draft_forward(k: int) -> ForwardFn:
    """A draft model's forward: :func:`model_body`, then its whole output head (k = 0) or FR-Spec's head over
    its K most frequent tokens (Zhao et al. 2025, arXiv 2502.14856): on a CPU the 49k-row head is most of a
    small draft's cost.

    Only drafts take the lean body: the target's passes stay transformers' own, the same passes as the
    target-alone baselines (``generate``), so a measured speedup is the drafting's and not a faster target.
    With a trimmed head, logits outside those K are -inf, so q is exactly 0 there: the token is still drawn
    from exactly the q the rules see, which keeps greedy identical and speculative sampling lossless (a token
    the draft cannot propose only lowers acceptance). Any other model with its whole head runs its own forward,
    whose logits may be more than the head's product (Gemma 2's soft-capping, Cohere's logit scale).
    """

    def forward(loaded: LoadedModel, new_ids: list[int], cache: DynamicCache, cached: int, n_last: int,
                layout: TreeLayout | None = None) -> torch.Tensor:
        weights = llama_weights(loaded.model)
        if weights is None and not k:
            return full_forward(loaded, new_ids, cache, cached, n_last, layout)
        with loaded.lock, torch.inference_mode():
            hidden = model_body(loaded, weights, new_ids, cache, cached, n_last, layout)  # (n_last, H)
            if not k:
                return loaded.model.get_output_embeddings()(hidden)  # (n_last, V)
            ids, head = trimmed_head(loaded, k)
            short = head(hidden)  # (n_last, K)
        logits = torch.full((n_last, loaded.model.config.vocab_size), -math.inf, dtype=short.dtype, device=short.device)
        logits[:, ids] = short
        return logits  # (n_last, V)

    return forward


def states_forward(loaded: LoadedModel, new_ids: list[int], cache: DynamicCache, cached: int, n_last: int,
                   layout: TreeLayout | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`full_forward`, plus the final (normed) hidden state of every new token: (logits, (T, H)), a tree's
    nodes included. Parallel drafters and EAGLE read these states; the target's body runs once either way."""
    with loaded.lock, torch.inference_mode():
        # (T, H): transformers' body, as the target's
        hidden = model_body(loaded, None, new_ids, cache, cached, len(new_ids), layout)
        logits = loaded.model.get_output_embeddings()(hidden[-n_last:])  # (n_last, V)
    return logits, hidden


def layer_skip_forward(skip: frozenset[int]) -> ForwardFn:
    """A forward function that runs the model with the decoder layers in ``skip`` left out.

    Draft & Verify (Zhang et al. 2023, Sec. 3.1): the draft is the target minus a subset of its
    layers, so no extra weights and the same vocabulary. Skipped layers get no KV entries; the other
    layers keep theirs in the drafter's own cache (layer 0 and the last layer are never skipped).
    A plain Llama's kept layers run through :func:`model_body`'s lean step (bit-identical to
    transformers' layers, with less Python around the matmuls), any other model's through its own decoder
    layers; then the model's output head. The two number the cache's layers differently (the kept layers
    compacted, or the model's own numbers), and a model always takes the same one.
    """

    def forward(loaded: LoadedModel, new_ids: list[int], cache: DynamicCache, cached: int, n_last: int,
                layout: TreeLayout | None = None) -> torch.Tensor:
        weights = llama_weights(loaded.model)
        with loaded.lock, torch.inference_mode():
            if weights is None:
                hidden = skipping_body(loaded, skip, new_ids, cache, cached, n_last, layout)
            else:
                kept = tuple(layer for index, layer in enumerate(weights.layers) if index not in skip)
                hidden = model_body(loaded, replace(weights, layers=kept), new_ids, cache, cached, n_last, layout)
            return loaded.model.lm_head(hidden)  # (n_last, V)

    return forward


def skipping_body(loaded: LoadedModel, skip: frozenset[int], new_ids: list[int], cache: DynamicCache, cached: int,
                  n_last: int, layout: TreeLayout | None = None) -> torch.Tensor:
    """Final normed hidden states (n_last, H) through transformers' own decoder layers, those in ``skip`` left out."""
    inner = loaded.model.model
    ids = torch.tensor([new_ids], device=loaded.device)  # (1, T)
    position_ids = new_positions(layout, cached, len(new_ids), loaded.device)[None]  # (1, T)
    hidden = inner.embed_tokens(ids)  # (1, T, H)
    if layout is not None:
        mask = layout.additive_mask(hidden.dtype, loaded.device)
    else:
        make_mask = create_sliding_window_causal_mask if sliding_window(inner.config) else create_causal_mask
        mask = make_mask(config=inner.config, inputs_embeds=hidden, attention_mask=None, past_key_values=cache,
                         position_ids=position_ids)
    position_embeddings = inner.rotary_emb(hidden, position_ids=position_ids)
    for index, layer in enumerate(inner.layers):
        if index not in skip:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=position_embeddings,
                           position_ids=position_ids, past_key_values=cache, use_cache=True)
    return inner.norm(hidden[0, -n_last:])  # (n_last, H)


def sliding_window(config) -> int | None:
    """The attention window of a model whose layers only see their last W positions (Mistral-style), else None."""
    return getattr(config, "sliding_window", None) or None


def has_mixed_attention(config) -> bool:
    """Layers of different attention kinds (Gemma 2/3: sliding and full layers alternate)."""
    return len(set(getattr(config, "layer_types", None) or ())) > 1


def common_prefix(a: list[int], b: list[int]) -> int:
    """The length of the longest common prefix of two token lists."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


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

    def feed(self, forward: ForwardFn, loaded: LoadedModel, new_ids: list[int], n_last: int,
             layout: TreeLayout | None = None) -> torch.Tensor:
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
            if getattr(layer, "is_initialized", False) and layer.keys.numel():
                layer.keys = layer.keys.index_select(-2, index.to(layer.keys.device))
                layer.values = layer.values.index_select(-2, index.to(layer.values.device))
        self.ids = [self.ids[i] for i in indices]
        if self.states is not None:
            self.states = self.states[index.to(self.states.device)]
