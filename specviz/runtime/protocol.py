"""The forward protocol: how the engine, the drafters and the machine profile run a model, whatever runs it.

A forward feeds new tokens to a model whose KV cache already holds ``cached`` tokens and returns the logits of the
last ``n_last`` of them::

    forward(loaded, new_ids, cache, cached, n_last, layout=None) -> logits (n_last, V)

    loaded   the shared model (:class:`~specviz.runtime.loaded.LoadedModel`), only read; its ``lock`` is held
             for the pass
    new_ids  T token ids, T >= 1
    cache    the ``DynamicCache`` holding ``cached`` positions; the T new keys and values are appended to it (or,
             where the model's passes run over a static buffer, the sequence's :class:`StaticCache` there)
    cached   positions already in the cache (their ids are :attr:`KVCachedSequence.ids`)
    n_last   how many of the last new positions' logits are wanted, 1 <= n_last <= T
    layout   None: the T tokens continue the cache causally; else a :class:`TreeLayout` (tree attention)

Three shapes of pass use it:

- **a step** (a draft's, or the target alone): T = 1, n_last = 1 -> (1, V);
- **a pass over k tokens** (verification of a chain of k drafted tokens, Leviathan et al. 2023): the last
  committed token and the k drafted ones, T = k + 1 (or k + 1 minus what the cache already holds), n_last =
  k + 1 -> (k + 1, V), row i the target's logits after the prefix and the first i drafted tokens;
- **a tree's pass** (SpecInfer, Miao et al. 2023; Sequoia, Chen et al. 2024): n tree nodes in a
  :class:`TreeLayout` (each node's position id, and the nodes it may see: its ancestors), n_last = n -> (n, V).

A :data:`StatesForwardFn` also returns the final hidden states of the T new tokens, (T, H), which drafters on
the target's states read (Medusa, EAGLE). :class:`KVCachedSequence` keeps one sequence's cache in step with its
committed tokens, so a forward is always fed only what the cache lacks. The reference forwards (torch, any device)
are :mod:`specviz.runtime.reference`'s; the CPU integer runtime (:mod:`specviz.runtime.cpu`) computes behind them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from transformers import DynamicCache
from transformers.cache_utils import CacheLayerMixin

from specviz.runtime.loaded import LoadedModel
from specviz.runtime.static_passes import DYNAMIC, StaticCache, static_passes
from specviz.runtime.tree_layout import TreeLayout

# A sequence's cache: transformers' growing one, or its slots in a model's static buffer (specviz.runtime.static_passes)
SequenceCache = DynamicCache | StaticCache
# A forward function: (model, new token ids, cache, tokens already cached, logits wanted, tree layout or None)
# -> logits (n_last, V). Without a layout the new tokens are a causal continuation of the cache.
ForwardFn = Callable[[LoadedModel, list[int], SequenceCache, int, int, TreeLayout | None], torch.Tensor]
# A forward that also returns the final hidden states of the new tokens: (logits, (T, H)) (:func:`states_forward`)
StatesForwardFn = Callable[
    [LoadedModel, list[int], SequenceCache, int, int, TreeLayout | None], tuple[torch.Tensor, torch.Tensor]
]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens the two lists share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two token lists differ (a shorter list differs where it ends), else None."""
    shared = common_prefix(a, b)
    return None if shared == len(a) == len(b) else shared


class KVCachedSequence:
    """A KV cache plus the token ids it holds, cropped back to what is still valid.

    ``pending(context)`` crops the cache to the longest prefix shared with ``context`` (keeping at
    least one token un-cached, whose logits are wanted) and returns the tokens still to feed.
    Accepted tokens are therefore never recomputed; rejected ones are dropped.

    The cache keeps every position in every layer, even for sliding-window models (Mistral, Gemma 2/3,
    Phi-3): a sliding cache layer cannot be cropped, and the model applies its window in the mask.
    """

    def __init__(self) -> None:
        # full layers only (no model config given): croppable, see above; a static cache where the model's passes
        # run over one and the forward takes it (set at the first feed: :func:`static_cache_for`)
        self.cache: SequenceCache = DynamicCache()
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
        if not self.ids and isinstance(self.cache, DynamicCache) and not self.cache.get_seq_length():
            self.cache = static_cache_for(loaded, forward) or self.cache
        logits = forward(loaded, new_ids, self.cache, len(self.ids), n_last, layout)
        if isinstance(logits, tuple):  # a forward that also returns the final hidden states
            logits, states = logits
            self.states = states if self.states is None else torch.cat([self.states[: len(self.ids)], states])
        self.ids.extend(new_ids)
        return logits

    def keep(self, indices: list[int]) -> None:
        """Keep only the cache entries at ``indices`` (in order): after a tree pass, the committed
        prefix and the accepted path, so accepted tokens are not recomputed next round."""
        if isinstance(self.cache, StaticCache):
            self.cache.keep(indices)
        else:
            keep_entries(self.cache, indices)
        self.ids = [self.ids[i] for i in indices]
        if self.states is not None:
            self.states = self.states[torch.tensor(indices, device=self.states.device)]


def keep_entries(cache: DynamicCache, indices: list[int]) -> None:
    """Keep only ``cache``'s entries at ``indices`` (in order), in every layer."""
    index = torch.tensor(indices, dtype=torch.long)
    for layer in cache.layers:
        assert isinstance(layer, CacheLayerMixin), "a cache made without a model config holds key-value layers"
        keys, values = layer.keys, layer.values
        if layer.is_initialized and keys is not None and values is not None and keys.numel():
            layer.keys = keys.index_select(-2, index.to(keys.device))
            layer.values = values.index_select(-2, index.to(values.device))


STATIC_TAKERS: weakref.WeakSet[Callable[..., object]] = weakref.WeakSet()  # forwards that take a StaticCache

F = TypeVar("F", bound=Callable[..., object])


def takes_static_cache(forward: F) -> F:
    """Mark ``forward`` as one that runs over a :class:`StaticCache` too (the reference and draft forwards)."""
    STATIC_TAKERS.add(forward)
    return forward


def reserve_slots(loaded: LoadedModel, slots: int) -> None:
    """Size ``loaded``'s static buffer for a run of ``slots`` tokens before the run starts, where its passes run over
    one: grown once, before any clock, not in the middle of the run (a buffer grown mid-run drops every captured graph,
    and each pass shape is captured again inside the run). Nothing where its passes are dynamic (every CPU's)."""
    if loaded.passes == DYNAMIC:
        return
    with loaded.lock, torch.inference_mode():  # the buffer is made, and read, in inference mode
        static_passes(loaded).reserve(slots)


def static_cache_for(loaded: LoadedModel, forward: ForwardFn | StatesForwardFn) -> StaticCache | None:
    """A new sequence's static cache where ``loaded``'s passes run over one (its ``passes`` is not "dynamic") and
    ``forward`` takes it (:func:`takes_static_cache`); else None."""
    if loaded.passes == DYNAMIC or forward not in STATIC_TAKERS:
        return None
    with loaded.lock:  # one model's passes made once, not by two sessions at once
        return StaticCache(static_passes(loaded))
