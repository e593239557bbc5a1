"""A toy drafter added through the registry alone (tests/test_toy_drafter.py): it proposes the context's last
token again, ``echo_times`` times, with q one-hot (so every rule stays exact). Its module is this file; its
settings group is :class:`EchoSettings`; its registry line is :data:`ENTRY`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.drafters.base import DraftBlock
from specviz.models.pair import ModelPair
from specviz.registry.drafters import DrafterEntry
from specviz.registry.shared_settings import DrafterShared
from specviz.rules.acceptance import Rule
from specviz.rules.distributions import one_hot
from specviz.runtime.protocol import KVCachedSequence
from specviz.settings import param


@dataclass(frozen=True)
class EchoSettings:
    echo_times: int = param(
        2, label="Echoes per round", section="Models", low=1, high=8, help="echo drafter: copies of the last token"
    )


@dataclass
class EchoDrafter:
    vocab_size: int
    times: int

    def propose(self, context: list[int], gamma: int, rule: Rule, generator: torch.Generator) -> DraftBlock:
        tokens = [context[-1]] * min(self.times, gamma)
        return DraftBlock(token_ids=tokens, draft_probs=[one_hot(t, self.vocab_size) for t in tokens])

    def update(self, drafted: int, accepted_path: list[int]) -> None:
        """Nothing to adapt."""


def build(
    settings: EchoSettings, shared: DrafterShared, pair: ModelPair, target_state: KVCachedSequence | None
) -> EchoDrafter:
    return EchoDrafter(pair.vocab_size, settings.echo_times)


ENTRY = DrafterEntry(
    "echo", "echo (toy)", "repeat the last token: a test's toy drafter", ("gamma",), "tests.toy_drafter", EchoSettings
)
