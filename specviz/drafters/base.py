"""The drafters' interface: who proposes the tokens the target then verifies in one pass.

One interface with two verbs, so every drafter (chains and trees) plugs into the same round loop:
``propose(context, gamma, rule, generator)`` returns a proposal (a :class:`DraftBlock` chain, or a
:class:`DraftTree`) and ``update(drafted, accepted_path)`` tells the drafter how its
proposal fared, so it can adapt its strategy or keep the accepted part of its caches. A proposal's
drafted tokens are nodes 1..n; a chain is a tree with one child per node (node i is its i-th token),
so its accepted path is always ``[1, ..., accepted]``.

:class:`AutoregressiveDrafter` drafts one token per forward of a draft model (``model``), of the target
minus layers (``layerskip``) or of the whole target (``oracle``). Drafters are cheap objects made per
run; they hold per-run state (KV caches) and reference the shared, read-only models. What a drafter's module
provides to the registry is :class:`DrafterModule` (and :class:`AutoregressiveModule`, :class:`StatesModule`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from specviz.models.loading import LoadedModel
from specviz.rules.acceptance import Rule
from specviz.runtime.protocol import ForwardFn, KVCachedSequence

if TYPE_CHECKING:
    from specviz.models.pair import ModelPair
    from specviz.registry.shared_settings import DrafterShared


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


@dataclass
class TreeNode:
    index: int  # 0 is the root: the last committed token, not a draft
    parent: int  # -1 for the root
    depth: int  # the root is depth 0; a node drafted in iteration k has depth k
    token_id: int
    draft_prob: float  # q(token) at its parent (the distribution it was drawn from)
    sibling_rank: int  # draw order among its siblings (0 = drawn first)
    children: list[int] = field(default_factory=list)
    log_prob: float = 0.0  # log q of the path from the root (beam search's phi)
    perturbed: float = 0.0  # Gumbel-perturbed path score (stochastic beam search's G)
    source: str = ""  # where it came from, where a tree mixes sources (the suffix drafter's: the draft model, ...)


@dataclass
class DraftTree:
    nodes: list[TreeNode]
    levels: list[list[int]]  # node indices drafted in each iteration (depth 1, 2, ...)
    draft_probs: dict[int, torch.Tensor]  # node index -> q at that node (float32, CPU), for expanded nodes
    forward_passes: int = 0
    # node index -> the q it alone was drawn from, for a node drawn independently of its siblings (the suffix
    # drafter's: one-hot for a suffix tree's candidate); its siblings' checks then follow SpecInfer's multi-step
    # speculative sampling (Miao et al. 2024) rather than RSD's draws without replacement
    drawn_from: dict[int, torch.Tensor] = field(default_factory=dict)

    def path_to(self, index: int) -> list[int]:
        """Node indices from depth 1 down to ``index``."""
        path = []
        while index > 0:
            path.append(index)
            index = self.nodes[index].parent
        return path[::-1]

    def tokens_to(self, index: int) -> list[int]:
        """The drafted tokens from depth 1 down to ``index`` (none for the root): the text before its children."""
        return [self.nodes[i].token_id for i in self.path_to(index)]

    @property
    def size(self) -> int:
        return len(self.nodes) - 1  # drafted tokens (the root is not drafted)


Proposal = DraftBlock | DraftTree


class Drafter(Protocol):
    """One run's drafter: it proposes each round's draft and learns how the last one fared."""

    def propose(self, context: list[int], gamma: int, rule: Rule, generator: torch.Generator) -> Proposal:
        """Draft one round's proposal after ``context`` (step 1 of a round; Leviathan et al. 2023, Alg. 1).

        Args:
            context: the committed token ids, prompt included; the last one is the pending token the draft follows
                (a tree's root).
            gamma: γ, the most a proposal may hold: a chain's drafted tokens, a tree's levels (its depth; each level
                may hold several nodes). The round loop passes the config's γ (a tree drafter's: its depth), cut so
                the correction or bonus still fits in ``max_new_tokens`` and the context; a drafter may propose fewer
                (an early exit, a lookup that finds nothing, a drafter with no states yet), 0 included.
            rule: the run's rule; its ``draft_distribution`` makes q from the draft's logits and its ``draft_token``
                picks each token from q (argmax, or a draw under speculative sampling).
            generator: the run's one seeded CPU random stream, for the draws.

        Returns:
            A :class:`DraftBlock` of k <= ``gamma`` tokens, each with its q (V,) (float32, CPU), or a
            :class:`DraftTree` of at most ``gamma`` levels, ``draft_probs`` holding q (V,) at each expanded node.
        """
        ...

    def update(self, drafted: int, accepted_path: list[int]) -> None:
        """Learn how the last proposal fared (step 5 of a round): adapt a strategy (an exit threshold) or keep the
        accepted part of the draft's caches.

        Args:
            drafted: the proposal's drafted tokens (its ``size``).
            accepted_path: its accepted nodes from the top (a chain's: ``[1, ..., accepted]``).
        """
        ...


class DrafterModule(Protocol):
    """What every drafter's module provides: ``build(settings, shared, pair, target_state)``, one run's drafter from
    its own settings group and what drafters share, never the whole config."""

    def build(
        self, settings: Any, shared: DrafterShared, pair: ModelPair, target_state: KVCachedSequence | None
    ) -> Drafter:
        """One run's drafter.

        Args:
            settings: the drafter's own settings group (its registry entry's ``settings``), None without one.
            shared: the shared settings drafters read (a tree's depth, the draft's head size, ...) and the groups
                its entry ``also_reads``.
            pair: the run's loaded models (the draft model, where the pair has one).
            target_state: the run's target KV cache, which drafters on the target's hidden states read; None where
                the drafter is built outside a run.

        Returns:
            The :class:`Drafter`, holding per-run state (its own caches) over the shared, read-only models.
        """
        ...


class AutoregressiveModule(DrafterModule, Protocol):
    """An autoregressive draft's module also gives its model and forward (cost ratio c, teacher-forced q), from the
    same settings as its ``build``."""

    def draft_source(self, settings: Any, shared: DrafterShared, pair: ModelPair) -> tuple[LoadedModel, ForwardFn]:
        """The model the drafter drafts with and its forward.

        Args:
            settings: the drafter's own settings group, None without one (as for ``build``).
            shared: the shared settings drafters read.
            pair: the loaded models.

        Returns:
            (model, forward): the forward gives the draft's logits (positions, V or more columns) over the ids fed.
        """
        ...


class StatesModule(DrafterModule, Protocol):
    """A drafter on the target's hidden states scores a given draft and times its own pass under a rule (its states
    come from verification), from the same settings as its ``build``, and describes its trained weights."""

    def draft_logits_along(
        self, settings: Any, shared: DrafterShared, pair: ModelPair, prefix: list[int], draft_ids: list[int]
    ) -> torch.Tensor:
        """The draft's logits at each token of a given draft, as this drafter would have scored it.

        Args:
            settings: the drafter's own settings group, None without one.
            shared: the shared settings drafters read.
            pair: the loaded models (the target's pass over ``prefix`` gives the states).
            prefix: the committed token ids the draft follows.
            draft_ids: the k drafted token ids.

        Returns:
            Logits (k', V or more columns), k' <= k (a parallel drafter scores at most its k heads); row i the
            logits the i-th drafted token was drawn from. Callers read the first V columns.
        """
        ...

    def ms_per_drafted_token(
        self, settings: Any, shared: DrafterShared, pair: ModelPair, prefix: list[int], repeats: int, rule: Rule
    ) -> float:
        """The drafter's own pass timed after ``prefix``, per drafted token.

        Args:
            settings: the drafter's own settings group, None without one.
            shared: the shared settings drafters read.
            pair: the loaded models.
            prefix: the committed token ids the timed pass follows.
            repeats: timed passes (after a warm-up); their median is returned.
            rule: the rule whose q the pass makes, where the drafter's step includes it.

        Returns:
            Milliseconds per drafted token.
        """
        ...

    def shipped_weights(self, name: str) -> dict[str, Any] | None:
        """The trained weights shipped for drafter ``name``, described (file, size, training run); None where none
        are shipped."""
        ...


class DraftExit(Protocol):
    """When to stop drafting a round early (:class:`ConfidenceExit`, layer-skip's
    :class:`~specviz.drafters.layerskip.AdaptiveExit`)."""

    threshold: float

    def should_stop(self, draft_probs: torch.Tensor) -> bool: ...

    def update(self, drafted: int, accepted: int) -> None: ...


@dataclass
class ConfidenceExit:
    """Stop a round's drafting at the first token the draft is unsure of: max_x q(x) < ``threshold`` (that token is
    still proposed). The stop reads only the draft's own q, a function of the prefix, so whether a position holds a
    drafted token is decided by the tokens before it: each position's accept-or-resample step (or the bonus draw)
    still emits a token distributed as p given that prefix (Leviathan et al. 2023; Chen et al. 2023), greedy stays
    token-identical and speculative sampling lossless. transformers' assisted generation stops the same way
    (``assistant_confidence_threshold``); SpecDec++ (Huang et al. 2024, arXiv 2405.19715) learns the stop."""

    threshold: float

    def should_stop(self, draft_probs: torch.Tensor) -> bool:
        return float(draft_probs.max()) < self.threshold

    def update(self, drafted: int, accepted: int) -> None:
        """A fixed threshold: nothing learnt from a round."""


@dataclass
class AutoregressiveDrafter:
    """Draft gamma tokens one at a time from a model (a draft model, or the target minus layers)."""

    loaded: LoadedModel
    forward: ForwardFn
    vocab_size: int
    adaptive_exit: DraftExit | None = None
    state: KVCachedSequence = field(init=False)

    def __post_init__(self) -> None:
        self.state = KVCachedSequence()

    def propose(self, context: list[int], gamma: int, rule: Rule, generator: torch.Generator) -> DraftBlock:
        threshold = self.adaptive_exit.threshold if self.adaptive_exit else None
        block = DraftBlock(token_ids=[], draft_probs=[], exit_threshold=threshold)
        feed = self.state.pending(context)
        for _ in range(gamma):
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
