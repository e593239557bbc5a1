"""Builders of a run's rule and drafter, named by the registry (:mod:`specviz.registry`).

Each builder takes ``(config, pair, target_state)``; each ``*_source`` gives the (model, forward)
an autoregressive drafter drafts with, which the analysis pages use to time it and to score q.
"""

from __future__ import annotations

from ..config import ConfigError, DecodeConfig
from ..drafters import AdaptiveExit, AutoregressiveDrafter, NgramDrafter
from ..forwards import (
    KVCachedSequence, check_skip_layers, default_skip_layers, draft_forward, has_mixed_attention, layer_skip_forward,
    sliding_window,
)
from ..models import LoadedModel
from ..parallel_drafters import ParallelDrafter, default_weights, load_drafter
from ..registry import drafter_spec, rule_spec
from ..tree import TreeDrafter
from ..verify import Rule
from .pair import ModelPair


def rule_for(config: DecodeConfig) -> Rule:
    """The verification rule the config names, built by its registry entry."""
    return rule_spec(config.rule).build(config)


def make_drafter(config: DecodeConfig, pair: ModelPair, target_state: KVCachedSequence | None = None):
    """The drafter the config names, built by its registry entry (parallel drafters read ``target_state``)."""
    return drafter_spec(config.drafter).build(config, pair, target_state)


def layer_skip_forward_for(config: DecodeConfig, pair: ModelPair):
    """The layer-skip self-draft's forward for this config (default: the target's middle layers)."""
    num_layers = pair.target.num_layers
    skip = config.skip_layers if config.skip_layers is not None else default_skip_layers(num_layers)
    try:
        skip_set = check_skip_layers(skip, num_layers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if has_mixed_attention(pair.target.model.config):
        raise ConfigError(f"layer-skip drafting runs one attention mask for all layers; {pair.target.name} mixes sliding "
                          "and full attention layers. Use a draft model or n-gram drafting with it.")
    if not hasattr(pair.target.model, "model") or not hasattr(pair.target.model.model, "layers"):
        raise ConfigError(f"layer-skip drafting needs a decoder-only model with model.layers; {pair.target.name} has none")
    return layer_skip_forward(skip_set)


def draft_vocab_for(config: DecodeConfig, draft: LoadedModel) -> int:
    """The draft head's size K for this run (0: the whole vocabulary). FR-Spec needs the draft's
    frequency ranking; ``None`` means the size the draft was shipped with (the full vocabulary without one)."""
    ranking = draft.vocab_ranking
    if config.draft_vocab is None:
        return ranking.recommended if ranking else 0
    if config.draft_vocab and ranking is None:
        raise ConfigError(f"A trimmed draft vocabulary (draft_vocab={config.draft_vocab}) needs a draft that ships a token "
                          f"frequency ranking, as the embedded draft does; {draft.name} has none (use 0: all tokens)")
    return 0 if ranking is None or config.draft_vocab >= len(ranking.order) else config.draft_vocab


def draft_forward_for(config: DecodeConfig, draft: LoadedModel):
    """The draft model's forward (:func:`~specviz.forwards.draft_forward`): the full output head, or FR-Spec's
    head over its K most frequent tokens."""
    k = draft_vocab_for(config, draft)
    return draft_forward(k)


def parallel_drafter(config: DecodeConfig, pair: ModelPair, target_state: KVCachedSequence | None) -> ParallelDrafter:
    """Blockwise heads or the mask-query drafter, from trained weights that fit this target."""
    path = config.parallel_weights or str(default_weights(config.drafter))
    try:
        module, meta = load_drafter(path, str(pair.target.device))
    except FileNotFoundError as exc:
        raise ConfigError(f"No trained {config.drafter} weights at {path}: train them with "
                          f"`python -m specviz train-drafter --kind {config.drafter} --target {config.target}`") from exc
    hidden = int(pair.target.model.config.hidden_size)
    if meta.kind != config.drafter or meta.hidden != hidden or meta.vocab != pair.vocab_size:
        raise ConfigError(f"The weights at {path} are a {meta.kind} drafter for {meta.target} (hidden {meta.hidden}, "
                          f"vocabulary {meta.vocab}); {pair.target.name} has hidden {hidden} and vocabulary {pair.vocab_size}")
    return ParallelDrafter(module, meta, pair.target, target_state, pair.vocab_size)


def model_source(config: DecodeConfig, pair: ModelPair) -> tuple[LoadedModel, object]:
    return pair.draft, draft_forward_for(config, pair.draft)


def model_drafter(config: DecodeConfig, pair: ModelPair, target_state: KVCachedSequence | None) -> AutoregressiveDrafter:
    return AutoregressiveDrafter("model", *model_source(config, pair), pair.vocab_size)


def layer_skip_source(config: DecodeConfig, pair: ModelPair) -> tuple[LoadedModel, object]:
    return pair.target, layer_skip_forward_for(config, pair)


def layer_skip_drafter(config: DecodeConfig, pair: ModelPair, target_state: KVCachedSequence | None) -> AutoregressiveDrafter:
    exit_rule = AdaptiveExit(config.exit_threshold) if config.exit_threshold > 0 else None
    return AutoregressiveDrafter("layerskip", *layer_skip_source(config, pair), pair.vocab_size, exit_rule)


def ngram_drafter(config: DecodeConfig, pair: ModelPair, target_state: KVCachedSequence | None) -> NgramDrafter:
    return NgramDrafter(pair.vocab_size, config.ngram_max)


def tree_drafter(config: DecodeConfig, pair: ModelPair, target_state: KVCachedSequence | None) -> TreeDrafter:
    """RSD's tree, drafted by the draft model when the pair has one, else the layer-skip self-draft."""
    if sliding_window(pair.target.model.config) or has_mixed_attention(pair.target.model.config):
        raise ConfigError(f"The tree drafter needs full attention: {pair.target.name} attends through a sliding window, "
                          "which a tree's attention mask does not model. Use a chain drafter with this model.")
    source, forward = model_source(config, pair) if pair.draft else layer_skip_source(config, pair)
    return TreeDrafter(source, forward, pair.vocab_size, config.tree_mode, config.branching, config.tree_depth,
                       config.beam_width)
