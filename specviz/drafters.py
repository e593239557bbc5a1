"""Drafters: who proposes the gamma tokens the target then verifies in one pass.

One interface with two verbs, so new drafters plug in without touching the round loop:
``propose(context, max_tokens, rule, generator) -> DraftBlock`` and ``update(drafted, accepted)``
(adapt the strategy from how many drafted tokens the target accepted).

- :class:`AutoregressiveDrafter` with :func:`full_forward`: a separate small draft model with its
  own KV cache (Leviathan et al. 2023; Chen et al. 2023).
- :class:`AutoregressiveDrafter` with :func:`layer_skip_forward`: the target itself with some layers
  skipped (Draft & Verify, Zhang et al. 2023, arXiv 2309.08168), optionally with the paper's adaptive
  draft exit. The shared model object and its config are never modified: the skip happens in our
  own loop over the decoder layers.
- :class:`NgramDrafter`: model-free prompt lookup; its proposals are a deterministic draft (q is
  one-hot), so every verification rule stays exact.

Drafters are cheap objects made per run; they hold per-run state (KV caches) and reference the
shared, read-only models.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch
from transformers import DynamicCache
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

from .models import LoadedModel
from .verify import Rule, one_hot

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


@dataclass
class DraftBlock:
    """What a drafter proposed for one round."""

    token_ids: list[int]
    draft_probs: list[torch.Tensor]  # the q (float32, CPU) each token was drawn from
    forward_passes: int = 0
    exit_threshold: float | None = None  # the adaptive exit threshold in force (layer-skip)


class Drafter(Protocol):
    kind: str

    def propose(self, context: list[int], max_tokens: int, rule: Rule, generator: torch.Generator) -> DraftBlock: ...

    def update(self, drafted: int, accepted: int) -> None: ...


# ---------------------------------------------------------------------------------------------
# Forward passes with a KV cache


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
        out = loaded.model(**_inputs(loaded, new_ids, layout), past_key_values=cache, use_cache=True, logits_to_keep=n_last)
    return out.logits[0]  # (n_last, V)


@functools.lru_cache(maxsize=16)
def trimmed_head(loaded: LoadedModel, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft's K most frequent token ids (K,) and their rows of its output head (K, H), made once."""
    ids = loaded.vocab_ranking.order[:k].to(loaded.device)
    return ids, loaded.model.get_output_embeddings().weight.detach()[ids].clone()


def trimmed_head_forward(k: int) -> ForwardFn:
    """A draft forward whose output head scores only the draft's K most frequent tokens (FR-Spec,
    Zhao et al. 2025, arXiv 2502.14856): on a CPU the 49k-row head is most of a small draft's cost.

    Logits outside those K are -inf, so q is exactly 0 there: the token is still drawn from exactly the
    q the rules see, which keeps greedy identical and speculative sampling lossless (a token the draft
    cannot propose only lowers acceptance).
    """

    def forward(loaded: LoadedModel, new_ids: list[int], cache: DynamicCache, cached: int, n_last: int,
                layout: TreeLayout | None = None) -> torch.Tensor:
        ids, rows = trimmed_head(loaded, k)
        with loaded.lock, torch.inference_mode():
            hidden = loaded.model.model(**_inputs(loaded, new_ids, layout), past_key_values=cache,
                                        use_cache=True).last_hidden_state[0, -n_last:]  # (n_last, H)
            short = hidden @ rows.T  # (n_last, K)
        logits = torch.full((n_last, loaded.model.config.vocab_size), -math.inf, dtype=short.dtype, device=short.device)
        logits[:, ids] = short
        return logits  # (n_last, V)

    return forward


def states_forward(loaded: LoadedModel, new_ids: list[int], cache: DynamicCache, cached: int, n_last: int,
                   layout: TreeLayout | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`full_forward`, plus the final (normed) hidden state of every new token: (logits, (T, H)).
    Parallel drafters read these states; the target's body runs once either way (Llama-style models)."""
    if layout is not None:
        raise ValueError("states_forward serves plain continuations, not trees")
    ids = torch.tensor([new_ids], device=loaded.device)  # (1, T)
    with loaded.lock, torch.inference_mode():
        hidden = loaded.model.model(input_ids=ids, past_key_values=cache, use_cache=True).last_hidden_state[0]  # (T, H)
        logits = loaded.model.get_output_embeddings()(hidden[-n_last:])  # (n_last, V)
    return logits, hidden


def layer_skip_forward(skip: frozenset[int]) -> ForwardFn:
    """A forward function that runs the model with the decoder layers in ``skip`` left out.

    Draft & Verify (Zhang et al. 2023, Sec. 3.1): the draft is the target minus a subset of its
    layers, so no extra weights and the same vocabulary. Skipped layers get no KV entries; the other
    layers keep theirs in the drafter's own cache (layer 0 and the last layer are never skipped).
    """

    def forward(loaded: LoadedModel, new_ids: list[int], cache: DynamicCache, cached: int, n_last: int,
                layout: TreeLayout | None = None) -> torch.Tensor:
        inner = loaded.model.model
        ids = torch.tensor([new_ids], device=loaded.device)  # (1, T)
        positions = layout.positions if layout else list(range(cached, cached + len(new_ids)))
        position_ids = torch.tensor([positions], device=loaded.device)  # (1, T)
        with loaded.lock, torch.inference_mode():
            hidden = inner.embed_tokens(ids)  # (1, T, H)
            if layout is not None:
                mask = layout.additive_mask(hidden.dtype, loaded.device)
            else:
                make_mask = create_sliding_window_causal_mask if sliding_window(inner.config) else create_causal_mask
                mask = make_mask(
                    config=inner.config, inputs_embeds=hidden, attention_mask=None,
                    past_key_values=cache, position_ids=position_ids,
                )
            position_embeddings = inner.rotary_emb(hidden, position_ids=position_ids)
            for index, layer in enumerate(inner.layers):
                if index in skip:
                    continue
                hidden = layer(
                    hidden, attention_mask=mask, position_embeddings=position_embeddings,
                    position_ids=position_ids, past_key_values=cache, use_cache=True,
                )
            hidden = inner.norm(hidden[:, -n_last:])  # (1, n_last, H)
            return loaded.model.lm_head(hidden)[0]  # (n_last, V)

    return forward


def sliding_window(config) -> int | None:
    """The attention window of a model whose layers only see their last W positions (Mistral-style), else None."""
    return getattr(config, "sliding_window", None) or None


def has_mixed_attention(config) -> bool:
    """Layers of different attention kinds (Gemma 2/3: sliding and full layers alternate)."""
    return len(set(getattr(config, "layer_types", None) or ())) > 1


def default_skip_layers(num_layers: int) -> tuple[int, ...]:
    """The two middle layers: ~66% top-1 agreement with the full SmolLM2-135M (30 layers) on CPU text."""
    width = 2 if num_layers >= 4 else 0
    start = num_layers // 2 - width // 2
    return tuple(range(start, start + width))


def check_skip_layers(skip: tuple[int, ...], num_layers: int) -> frozenset[int]:
    """Validate a skip set: indices inside the model, never the first or last layer."""
    bad = [i for i in skip if not 0 < i < num_layers - 1]
    if bad:
        raise ValueError(
            f"skip_layers {bad} out of range: this model has layers 0..{num_layers - 1}, "
            f"and the first and last layers cannot be skipped"
        )
    return frozenset(skip)


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
        keep = 0
        limit = min(len(self.ids), len(context) - 1)
        while keep < limit and self.ids[keep] == context[keep]:
            keep += 1
        if keep < len(self.ids):
            self.cache.crop(keep - len(self.ids))  # negative: number of trailing tokens to drop
            self.ids = self.ids[:keep]
            self.states = self.states[:keep] if self.states is not None else None
        return context[keep:]

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


# ---------------------------------------------------------------------------------------------
# Drafters


@dataclass
class AdaptiveExit:
    """Draft & Verify's adaptive draft-exiting (Zhang et al. 2023, Sec. 3.3).

    Stop drafting a round when the draft's top-1 probability falls below ``threshold``; after each
    round move the threshold up by ``step`` when the smoothed acceptance rate is below
    ``target_acceptance`` (drafts too long) and down otherwise.
    """

    threshold: float
    target_acceptance: float = 0.8
    step: float = 0.05
    momentum: float = 0.5
    acceptance: float = 1.0

    def should_stop(self, draft_probs: torch.Tensor) -> bool:
        return float(draft_probs.max()) < self.threshold

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.acceptance = self.momentum * self.acceptance + (1 - self.momentum) * accepted / drafted
        delta = self.step if self.acceptance < self.target_acceptance else -self.step
        self.threshold = min(1.0, max(0.0, self.threshold + delta))


@dataclass
class AutoregressiveDrafter:
    """Draft gamma tokens one at a time from a model (a draft model, or the target minus layers)."""

    kind: str
    loaded: LoadedModel
    forward: ForwardFn
    vocab_size: int
    adaptive_exit: AdaptiveExit | None = None
    state: KVCachedSequence = field(init=False)

    def __post_init__(self) -> None:
        self.state = KVCachedSequence()

    def propose(self, context: list[int], max_tokens: int, rule: Rule, generator: torch.Generator) -> DraftBlock:
        threshold = self.adaptive_exit.threshold if self.adaptive_exit else None
        block = DraftBlock(token_ids=[], draft_probs=[], exit_threshold=threshold)
        feed = self.state.pending(context)
        for _ in range(max_tokens):
            logits = self.state.feed(self.forward, self.loaded, feed, 1)[-1, : self.vocab_size]
            block.forward_passes += 1
            draft_probs = rule.draft_distribution(logits).cpu()  # q, float32
            token = rule.draft_token(draft_probs, generator)
            block.token_ids.append(token)
            block.draft_probs.append(draft_probs)
            if self.adaptive_exit and self.adaptive_exit.should_stop(draft_probs):
                break
            feed = [token]
        return block

    def update(self, drafted: int, accepted: int) -> None:
        if self.adaptive_exit:
            self.adaptive_exit.update(drafted, accepted)


@dataclass
class NgramDrafter:
    """Prompt lookup: continue the earliest earlier occurrence of the context's last n tokens.

    Tries n = ngram_max down to 1 (Saxena 2023, "prompt lookup decoding"). The proposal is
    deterministic, so q = one-hot(token) and speculative sampling accepts x with probability p(x).
    """

    vocab_size: int
    ngram_max: int = 3
    kind: str = "ngram"

    def propose(self, context: list[int], max_tokens: int, rule: Rule, generator: torch.Generator) -> DraftBlock:
        tokens = lookup_continuation(context, self.ngram_max, max_tokens)
        return DraftBlock(token_ids=tokens, draft_probs=[one_hot(t, self.vocab_size) for t in tokens])

    def update(self, drafted: int, accepted: int) -> None:
        """Prompt lookup has no strategy to adapt."""


def lookup_continuation(context: list[int], ngram_max: int, max_tokens: int) -> list[int]:
    """Up to ``max_tokens`` ids that followed the earliest earlier match of the longest possible suffix.

    As in prompt lookup decoding (Saxena 2023): the first occurrence with a non-empty continuation wins.
    """
    if max_tokens <= 0:
        return []
    for n in range(min(ngram_max, len(context) - 1), 0, -1):
        suffix = context[-n:]
        for start in range(len(context) - n):  # excludes the suffix itself
            if context[start : start + n] == suffix:
                return context[start + n : start + n + max_tokens]
    return []
