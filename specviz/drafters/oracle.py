"""The oracle drafter: the target drafts for itself (draft = target), the upper bound of acceptance.

With q = p at every position, greedy accepts every drafted token (argmax q = argmax p) and
speculative sampling accepts with probability min(1, p/q) = 1, so alpha = 1 and every round emits
gamma + 1 tokens (Leviathan et al. 2023, Eq. 1 at alpha = 1). Each drafted token costs a full target
forward (c = 1), so the theory's speedup (gamma + 1) / (gamma c + 1) = 1: in class it shows that
acceptance alone is not speed, the draft must also be cheap.
"""

from __future__ import annotations

from specviz.drafters.base import AutoregressiveDrafter
from specviz.models.loading import LoadedModel
from specviz.models.pair import ModelPair
from specviz.registry.shared_settings import DrafterShared
from specviz.runtime.protocol import ForwardFn, KVCachedSequence
from specviz.runtime.reference import full_forward


def draft_source(settings: None, shared: DrafterShared, pair: ModelPair) -> tuple[LoadedModel, ForwardFn]:
    """(model, forward) the oracle drafts with: the target itself, all its layers."""
    return pair.target, full_forward


def build(
    settings: None, shared: DrafterShared, pair: ModelPair, target_state: KVCachedSequence | None
) -> AutoregressiveDrafter:
    return AutoregressiveDrafter(*draft_source(settings, shared, pair), pair.vocab_size)
