"""Layer-skip self-drafting (Draft & Verify, Zhang et al. 2023, arXiv 2309.08168): the target with some
of its layers skipped drafts for itself, optionally with the paper's adaptive draft exit.

The shared model object and its config are never modified: the skip happens in specviz's own loop over
the decoder layers (:func:`specviz.runtime.skipping_forward.layer_skip_forward`).
"""

from __future__ import annotations

from dataclasses import dataclass

from specviz.drafters.base import AutoregressiveDrafter, ConfidenceExit
from specviz.models.loading import LoadedModel
from specviz.models.pair import ModelPair
from specviz.registry.drafter_settings import LayerSkipSettings
from specviz.registry.shared_settings import DrafterShared
from specviz.runtime.protocol import ForwardFn, KVCachedSequence
from specviz.runtime.skipping_forward import has_mixed_attention, layer_skip_forward
from specviz.settings import ConfigError


@dataclass
class AdaptiveExit(ConfidenceExit):
    """Draft & Verify's adaptive draft-exiting (Zhang et al. 2023, Sec. 3.3).

    Stop drafting a round when the draft's top-1 probability falls below ``threshold`` (:class:`ConfidenceExit`);
    after each round move the threshold up by ``step`` when the smoothed acceptance rate is below
    ``target_acceptance`` (drafts too long) and down otherwise.
    """

    target_acceptance: float = 0.8
    step: float = 0.05
    momentum: float = 0.5
    acceptance: float = 1.0

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.acceptance = self.momentum * self.acceptance + (1 - self.momentum) * accepted / drafted
        delta = self.step if self.acceptance < self.target_acceptance else -self.step
        self.threshold = min(1.0, max(0.0, self.threshold + delta))


def default_skip_layers(num_layers: int) -> tuple[int, ...]:
    """The two middle layers."""
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


def layer_skip_forward_for(settings: LayerSkipSettings, pair: ModelPair) -> ForwardFn:
    """The layer-skip self-draft's forward with its group's layers skipped (default: the target's middle layers)."""
    num_layers = pair.target.num_layers
    chosen = settings.skip_layers
    skip = chosen if chosen is not None else default_skip_layers(num_layers)
    try:
        skip_set = check_skip_layers(skip, num_layers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if has_mixed_attention(pair.target.model.config):
        raise ConfigError(
            f"layer-skip drafting runs one attention mask for all layers; {pair.target.name} mixes "
            "sliding and full attention layers. Use a draft model or n-gram drafting with it."
        )
    if not hasattr(pair.target.model, "model") or not hasattr(pair.target.model.model, "layers"):
        raise ConfigError(
            f"layer-skip drafting needs a decoder-only model with model.layers; {pair.target.name} has none"
        )
    return layer_skip_forward(skip_set)


def draft_source(settings: LayerSkipSettings, shared: DrafterShared, pair: ModelPair) -> tuple[LoadedModel, ForwardFn]:
    return pair.target, layer_skip_forward_for(settings, pair)


def build(
    settings: LayerSkipSettings, shared: DrafterShared, pair: ModelPair, target_state: KVCachedSequence | None
) -> AutoregressiveDrafter:
    exit_rule = AdaptiveExit(settings.exit_threshold) if settings.exit_threshold > 0 else None
    return AutoregressiveDrafter(*draft_source(settings, shared, pair), pair.vocab_size, exit_rule)
