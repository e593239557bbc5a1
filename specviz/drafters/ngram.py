"""Prompt lookup (Saxena 2023): a model-free drafter that copies what followed the same words earlier.

Its proposals are a deterministic draft (q is one-hot), so every verification rule stays exact:
speculative sampling accepts a proposed x with probability min(1, p(x) / 1) = p(x).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.drafters.base import DraftBlock
from specviz.models.pair import ModelPair
from specviz.registry.drafter_settings import NgramSettings
from specviz.registry.shared_settings import DrafterShared
from specviz.rules.acceptance import Rule
from specviz.rules.distributions import one_hot
from specviz.runtime.protocol import KVCachedSequence


@dataclass
class NgramDrafter:
    """Prompt lookup: continue the earliest earlier occurrence of the context's last n tokens.

    Tries n = ngram_max down to 1 (Saxena 2023, "prompt lookup decoding"). The proposal is
    deterministic, so q = one-hot(token) and speculative sampling accepts x with probability p(x).
    """

    vocab_size: int
    ngram_max: int = 3

    def propose(self, context: list[int], gamma: int, rule: Rule, generator: torch.Generator) -> DraftBlock:
        tokens = lookup_continuation(context, self.ngram_max, gamma)
        return DraftBlock(token_ids=tokens, draft_probs=[one_hot(t, self.vocab_size) for t in tokens])

    def update(self, drafted: int, accepted_path: list[int]) -> None:
        """Prompt lookup has no strategy to adapt."""


def lookup_continuation(context: list[int], ngram_max: int, gamma: int) -> list[int]:
    """Up to ``gamma`` ids that followed the earliest earlier match of the longest possible suffix.

    As in prompt lookup decoding (Saxena 2023): the first occurrence with a non-empty continuation wins.
    """
    if gamma <= 0:
        return []
    for n in range(min(ngram_max, len(context) - 1), 0, -1):
        suffix = context[-n:]
        for start in range(len(context) - n):  # excludes the suffix itself
            if context[start : start + n] == suffix:
                return context[start + n : start + n + gamma]
    return []


def build(
    settings: NgramSettings, shared: DrafterShared, pair: ModelPair, target_state: KVCachedSequence | None
) -> NgramDrafter:
    return NgramDrafter(pair.vocab_size, settings.ngram_max)
