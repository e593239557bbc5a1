"""A separate small draft model with its own KV cache (Leviathan et al. 2023; Chen et al. 2023), scoring
the full vocabulary or FR-Spec's head over its K most frequent tokens (Zhao et al. 2025, arXiv 2502.14856).
"""

from __future__ import annotations

from specviz.config import ConfigError, DecodeConfig
from specviz.drafters.base import AutoregressiveDrafter
from specviz.models.forwards import ForwardFn, KVCachedSequence, draft_forward
from specviz.models.loading import LoadedModel
from specviz.models.pair import ModelPair


def draft_vocab_for(config: DecodeConfig, draft: LoadedModel) -> int:
    """The draft head's size K for this run (0: the whole vocabulary). FR-Spec needs the draft's
    frequency ranking; ``None`` means the size the draft was shipped with (the full vocabulary without one)."""
    ranking = draft.vocab_ranking
    if config.draft_vocab is None:
        return ranking.recommended if ranking else 0
    if config.draft_vocab and ranking is None:
        raise ConfigError(f"A trimmed draft vocabulary (draft_vocab={config.draft_vocab}) needs a draft that ships a "
                          f"token frequency ranking, as the embedded draft does; {draft.name} has none (use 0: all "
                          "tokens)")
    return 0 if ranking is None or config.draft_vocab >= len(ranking.order) else config.draft_vocab


def draft_forward_for(config: DecodeConfig, draft: LoadedModel) -> ForwardFn:
    """The draft model's forward (:func:`~specviz.models.forwards.draft_forward`): the full output head, or
    FR-Spec's head over its K most frequent tokens."""
    return draft_forward(draft_vocab_for(config, draft))


def draft_source(config: DecodeConfig, pair: ModelPair) -> tuple[LoadedModel, ForwardFn]:
    return pair.draft, draft_forward_for(config, pair.draft)


def build(config: DecodeConfig, pair: ModelPair, target_state: KVCachedSequence | None) -> AutoregressiveDrafter:
    return AutoregressiveDrafter("model", *draft_source(config, pair), pair.vocab_size)
