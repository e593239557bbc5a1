"""A draft model's direct forward: the direct Llama body (:func:`~specviz.runtime.reference.model_body`), then its whole
output head or FR-Spec's head trimmed to its K most frequent tokens (Zhao et al. 2025)."""

from __future__ import annotations

import torch

from specviz.runtime.cpu.kernel_paths import Projection
from specviz.runtime.llama_step import llama_weights
from specviz.runtime.loaded import LoadedModel, memoised_while_alive
from specviz.runtime.protocol import ForwardFn, SequenceCache, TreeLayout, takes_static_cache
from specviz.runtime.reference import full_forward, model_body
from specviz.runtime.static_passes import StaticCache
from specviz.runtime.vocab_ranking import to_full_vocab


@memoised_while_alive
def trimmed_head(loaded: LoadedModel, k: int) -> tuple[torch.Tensor, Projection]:
    """The draft's K most frequent token ids (K,) and the projection onto their rows of its output head (K, H), on
    the draft's kernel path, made once per live draft."""
    ranking = loaded.vocab_ranking
    assert ranking is not None, "a trimmed head (k > 0) is asked of a draft with a ranking (draft_head_size)"
    ids = ranking.order[:k].to(loaded.device)
    return ids, Projection.of(loaded.model.get_output_embeddings()).rows(ids)


def draft_forward(k: int) -> ForwardFn:
    """A draft model's forward: :func:`model_body`, then its whole output head (k = 0) or FR-Spec's head over
    its K most frequent tokens (Zhao et al. 2025, arXiv 2502.14856): on a CPU the 49k-row head is most of a
    small draft's cost.

    A float target's passes stay transformers' own, the same passes as the target-alone baselines (``generate``),
    so a measured speedup is the drafting's and not a faster target; a quantised target's take the direct Llama body in
    every lane, where it computes transformers' own bits (:func:`~specviz.runtime.reference.direct_body_weights`).
    With a trimmed head, logits outside those K are -inf, so q is exactly 0 there: the token is still drawn
    from exactly the q the rules see, which keeps greedy identical and speculative sampling lossless (a token
    the draft cannot propose only lowers acceptance). Any other model with its whole head runs its own forward,
    whose logits may be more than the head's product (Gemma 2's soft-capping, Cohere's logit scale).
    """

    @takes_static_cache
    def forward(
        loaded: LoadedModel,
        new_ids: list[int],
        cache: SequenceCache,
        cached: int,
        n_last: int,
        layout: TreeLayout | None = None,
    ) -> torch.Tensor:
        if isinstance(cache, StaticCache) and not k:
            return cache.passes.run(cache, new_ids, cached, n_last, layout)[0]
        if isinstance(cache, StaticCache):
            top, trimmed = trimmed_head(loaded, k)
            short = cache.passes.run(cache, new_ids, cached, n_last, layout, head=(f"top {k}", trimmed))[0]
            return to_full_vocab(short, top, loaded.model.config.vocab_size)  # (n_last, V)
        weights = llama_weights(loaded.model)
        if weights is None and not k:
            return full_forward(loaded, new_ids, cache, cached, n_last, layout)
        with loaded.lock, torch.inference_mode():
            hidden = model_body(loaded, weights, new_ids, cache, cached, n_last, layout)  # (n_last, H)
            if not k:
                return loaded.model.get_output_embeddings()(hidden)  # (n_last, V)
            ids, head = trimmed_head(loaded, k)
            short = head(hidden)  # (n_last, K)
        return to_full_vocab(short, ids, loaded.model.config.vocab_size)  # (n_last, V)

    return forward
