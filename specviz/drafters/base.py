"""The drafters' interface: who proposes the tokens the target then verifies in one pass.

One interface with two verbs, so every drafter (chains and trees) plugs into the same round loop:
``propose(context, max_tokens, rule, generator)`` returns a proposal (a :class:`DraftBlock` chain, or a
:class:`specviz.drafters.tree.DraftTree`) and ``update(drafted, accepted_path)`` tells the drafter how its
proposal fared, so it can adapt its strategy or keep the accepted part of its caches. A proposal's
drafted tokens are nodes 1..n; a chain is a tree with one child per node (node i is its i-th token),
so its accepted path is always ``[1, ..., accepted]``.

:class:`AutoregressiveDrafter` drafts one token per forward of a draft model (``model``), of the target
minus layers (``layerskip``) or of the whole target (``oracle``). Drafters are cheap objects made per
run; they hold per-run state (KV caches) and reference the shared, read-only models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from specviz.models.forwards import ForwardFn, KVCachedSequence
from specviz.models.loading import LoadedModel
from specviz.rules.acceptance import Rule


@dataclass
class DraftBlock:
    """What a drafter proposed for one round."""

    token_ids: list[int]
    draft_probs: list[torch.Tensor]  # the q (float32, CPU) each token was drawn from
    forward_passes: int = 0
    exit_threshold: float | None = None  # the adaptive exit threshold in force (layer-skip)

    @property
    def size(self) -> int:
        return len(self.token_ids)  # drafted tokens


class Drafter(Protocol):
    kind: str

    def propose(self, context: list[int], max_tokens: int, rule: Rule, generator: torch.Generator): ...

    def update(self, drafted: int, accepted_path: list[int]) -> None: ...


class DraftExit(Protocol):
    """When to stop drafting a round early (layer-skip's :class:`~specviz.drafters.layerskip.AdaptiveExit`)."""

    threshold: float

    def should_stop(self, draft_probs: torch.Tensor) -> bool: ...

    def update(self, drafted: int, accepted: int) -> None: ...


@dataclass
class AutoregressiveDrafter:
    """Draft gamma tokens one at a time from a model (a draft model, or the target minus layers)."""

    kind: str
    loaded: LoadedModel
    forward: ForwardFn
    vocab_size: int
    adaptive_exit: DraftExit | None = None
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

    def update(self, drafted: int, accepted_path: list[int]) -> None:
        if self.adaptive_exit:
            self.adaptive_exit.update(drafted, len(accepted_path))
