"""The model pair a run uses, loaded once per process and shared read-only; the prompt's checks."""

from __future__ import annotations

from dataclasses import dataclass

from specviz.config import DecodeConfig
from specviz.limits import PROMPT_TOKENS_MAX
from specviz.models.loading import LoadedModel, check_same_vocabulary, encode_prompt, load_model
from specviz.settings import ConfigError


@dataclass(frozen=True)
class ModelPair:
    """The target and, for the draft-model drafter, the draft: shared, read-only."""

    target: LoadedModel
    draft: LoadedModel | None = None

    @property
    def vocab_size(self) -> int:
        """Ids both models can score (padded embedding rows beyond it are never emitted)."""
        sizes = [m.model.get_output_embeddings().out_features for m in (self.target, self.draft) if m]
        return min(sizes)


def uses_draft_model(config: DecodeConfig) -> bool:
    """Whether the config's drafter reads a separate draft model (:attr:`DecodeConfig.draft_spec` names it)."""
    return config.draft_spec is not None


def load_pair(config: DecodeConfig) -> ModelPair:
    """Load (or fetch from the process cache) the models a config names and check they fit together."""
    target = load_model(config.target, config.device, config.dtype)
    if config.draft_spec is None:
        return ModelPair(target)
    draft = load_model(config.draft_spec, config.device, config.draft_precision)
    check_same_vocabulary(target, draft)
    return ModelPair(target, draft)


def prompt_ids_for(
    pair: ModelPair, config: DecodeConfig, prompt: str | None, prompt_ids: list[int] | None
) -> list[int]:
    """Token ids of the prompt: raw ``prompt_ids`` as given, else the text (chat template applied)."""
    if prompt_ids is None:
        if prompt is None or not prompt.strip():
            raise ConfigError("The prompt is empty: type some text to continue")
        prompt_ids = encode_prompt(pair.target.tokenizer, prompt, config.chat_template)
    if not prompt_ids:
        raise ConfigError("The prompt is empty: give at least one token id")
    if len(prompt_ids) > PROMPT_TOKENS_MAX:
        raise ConfigError(f"The prompt has {len(prompt_ids)} tokens; the limit is {PROMPT_TOKENS_MAX}")
    if len(prompt_ids) >= pair.target.context_length:
        raise ConfigError(f"The prompt fills the model's {pair.target.context_length}-token context")
    bad = [i for i in prompt_ids if not 0 <= i < pair.vocab_size]
    if bad:
        raise ConfigError(f"Prompt token ids {bad[:5]} are outside the vocabulary (0..{pair.vocab_size - 1})")
    return list(prompt_ids)


def eos_ids(loaded: LoadedModel) -> set[int]:
    """The ids that end generation, as the target's own ``generate`` would use them."""
    eos = loaded.model.generation_config.eos_token_id
    if eos is None:
        eos = loaded.tokenizer.eos_token_id
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, (list, tuple)) else {int(eos)}
