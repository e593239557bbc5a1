"""A separate small draft model with its own KV cache (Leviathan et al. 2023; Chen et al. 2023), scoring
the full vocabulary or FR-Spec's head over its K most frequent tokens (Zhao et al. 2025, arXiv 2502.14856), drafting
γ tokens a round or fewer where it stops at its first unsure token (:class:`~specviz.drafters.base.ConfidenceExit`).
"""

from __future__ import annotations

from specviz.drafters.base import AutoregressiveDrafter, ConfidenceExit
from specviz.models.loading import LoadedModel
from specviz.models.pair import ModelPair
from specviz.registry.drafter_settings import DraftModelSettings
from specviz.registry.shared_settings import DrafterShared
from specviz.runtime.draft_forward import draft_forward
from specviz.runtime.protocol import ForwardFn, KVCachedSequence


def draft_forward_for(draft_vocab: int | None, draft: LoadedModel) -> ForwardFn:
    """The draft model's forward (:func:`~specviz.runtime.draft_forward.draft_forward`): the full output head, or
    FR-Spec's head over its ``draft_vocab`` most frequent tokens (None: the size the draft ships with)."""
    return draft_forward(draft.draft_head_size(draft_vocab))


def draft_source(
    settings: DraftModelSettings | None, shared: DrafterShared, pair: ModelPair
) -> tuple[LoadedModel, ForwardFn]:
    """The draft model and its forward (its head size is a shared setting; a tree drafting from the draft model asks
    without this drafter's group)."""
    assert pair.draft is not None, "a pair for the draft-model drafter holds a draft (its entry: draft_model='always')"
    return pair.draft, draft_forward_for(shared.draft_vocab, pair.draft)


def build(
    settings: DraftModelSettings, shared: DrafterShared, pair: ModelPair, target_state: KVCachedSequence | None
) -> AutoregressiveDrafter:
    stop = ConfidenceExit(settings.confidence_exit) if settings.confidence_exit > 0 else None
    return AutoregressiveDrafter(*draft_source(settings, shared, pair), pair.vocab_size, stop)
