"""Drafters: who proposes the gamma tokens the target then verifies in one pass.

One interface with two verbs, so every drafter (chains and trees) plugs into the same round loop:
``propose(context, max_tokens, rule, generator)`` returns a proposal (a :class:`DraftBlock` chain, or a
:class:`specviz.tree.DraftTree`) and ``update(drafted, accepted_path)`` tells the drafter how its
proposal fared, so it can adapt its strategy or keep the accepted part of its caches. A proposal's
drafted tokens are nodes 1..n; a chain is a tree with one child per node (node i is its i-th token),
so its accepted path is always ``[1, ..., accepted]``.

- :class:`AutoregressiveDrafter` with :func:`draft_forward`: a separate small draft model with its
  own KV cache (Leviathan et al. 2023; Chen et al. 2023).
- :class:`AutoregressiveDrafter` with :func:`layer_skip_forward`: the target itself with some layers
  skipped (Draft & Verify, Zhang et al. 2023, arXiv 2309.08168), optionally with the paper's adaptive
  draft exit. The shared model object and its config are never modified: the skip happens in our
  own loop over the decoder layers.
- :class:`NgramDrafter`: model-free prompt lookup; its proposals are a deterministic draft (q is
  one-hot), so every verification rule stays exact.

Drafters are cheap objects made per run; they hold per-run state (KV caches) and reference the
shared, read-only models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from .forwards import ForwardFn, KVCachedSequence
from .models import LoadedModel
from .distributions import one_hot
from .verify import Rule

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


# ---------------------------------------------------------------------------------------------
# Drafters


@dataclass
class AdaptiveExit:
    """Draft & Verify's adaptive draft-exiting (Zhang et al. 2023, Sec. 3.3).

    Stop drafting a round when the draft's top-1 probability falls below ``threshold``; after each
    round move the threshold up by ``step`` when the smoothed acceptance rate is below
    ``target_acceptance`` (drafts too long) and down otherwise.
    """

    threshold: float
    target_acceptance: float = 0.8
    step: float = 0.05
    momentum: float = 0.5
    acceptance: float = 1.0

    def should_stop(self, draft_probs: torch.Tensor) -> bool:
        return float(draft_probs.max()) < self.threshold

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.acceptance = self.momentum * self.acceptance + (1 - self.momentum) * accepted / drafted
        delta = self.step if self.acceptance < self.target_acceptance else -self.step
        self.threshold = min(1.0, max(0.0, self.threshold + delta))


@dataclass
class AutoregressiveDrafter:
    """Draft gamma tokens one at a time from a model (a draft model, or the target minus layers)."""

    kind: str
    loaded: LoadedModel
    forward: ForwardFn
    vocab_size: int
    adaptive_exit: AdaptiveExit | None = None
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


@dataclass
class NgramDrafter:
    """Prompt lookup: continue the earliest earlier occurrence of the context's last n tokens.

    Tries n = ngram_max down to 1 (Saxena 2023, "prompt lookup decoding"). The proposal is
    deterministic, so q = one-hot(token) and speculative sampling accepts x with probability p(x).
    """

    vocab_size: int
    ngram_max: int = 3
    kind: str = "ngram"

    def propose(self, context: list[int], max_tokens: int, rule: Rule, generator: torch.Generator) -> DraftBlock:
        tokens = lookup_continuation(context, self.ngram_max, max_tokens)
        return DraftBlock(token_ids=tokens, draft_probs=[one_hot(t, self.vocab_size) for t in tokens])

    def update(self, drafted: int, accepted_path: list[int]) -> None:
        """Prompt lookup has no strategy to adapt."""


def lookup_continuation(context: list[int], ngram_max: int, max_tokens: int) -> list[int]:
    """Up to ``max_tokens`` ids that followed the earliest earlier match of the longest possible suffix.

    As in prompt lookup decoding (Saxena 2023): the first occurrence with a non-empty continuation wins.
    """
    if max_tokens <= 0:
        return []
    for n in range(min(ngram_max, len(context) - 1), 0, -1):
        suffix = context[-n:]
        for start in range(len(context) - n):  # excludes the suffix itself
            if context[start : start + n] == suffix:
                return context[start + n : start + n + max_tokens]
    return []
