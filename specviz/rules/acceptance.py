"""What a verification rule is: the :class:`Rule` protocol, the :class:`Verdict` on one drafted token, the
left-to-right check of a block, and :class:`ArgmaxRule`, what every deterministic rule shares.

Convention (Leviathan et al. 2023): ``p`` / ``target_probs`` is the target's distribution and
``q`` / ``draft_probs`` the draft's, both (V,) over the same vocabulary, both float32 and summing to one.
A rule answers one round's questions: how the draft picks a token from its logits, whether a drafted token is
accepted, what the target emits at the first rejection (the correction, and the distribution it is drawn from)
or after a fully accepted block (the bonus), and, in a tree, what the next sibling of a rejected token is checked
against. Each rule is its own module in :mod:`specviz.rules` with a ``build(settings)`` (:class:`RuleModule`) and
one line in :mod:`specviz.registry.rules`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from specviz.rules.distributions import softmax32

# where a correction is drawn from, as a round's record names it (EmittedToken.source)
RESIDUAL = "residual"  # norm(max(0, p - q)): the part of p the draft did not cover (Leviathan et al. 2023, Alg. 1)
TARGET = "target"  # p itself


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one drafted token."""

    accepted: bool
    accept_prob: float  # probability the rule accepts this token (1/0 for deterministic rules)
    uniform: float | None = None  # the draw u compared with accept_prob (speculative sampling)
    tau_gap: float | None = None  # log p(top1) - log p(token) (top-beta rule)
    candidates: tuple[int, ...] = ()  # the target's beta best token ids (top-beta rule)


class Rule(Protocol):
    """A verification rule. Every distribution is a float32 (V,) tensor over the vocabulary both models score (V:
    the pair's ``vocab_size``); ``target_probs`` is p, ``draft_probs`` is q, both at the same position.

    ``stochastic``: the draft samples its tokens (tree drafters then draw siblings without replacement) rather
    than taking argmax q. ``correction_source``: what the correction is drawn from, :data:`RESIDUAL` or
    :data:`TARGET`: the round's record says so for every correction the rule makes.
    """

    @property
    def stochastic(self) -> bool: ...

    @property
    def correction_source(self) -> str: ...

    def draft_distribution(self, logits: torch.Tensor) -> torch.Tensor:
        """q, what the draft draws its token from.

        Args:
            logits: the draft's logits (V,) at one position, in any float precision.

        Returns:
            q (V,), float32 (speculative sampling: after the same warps as p).
        """
        ...

    def target_distribution(self, logits: torch.Tensor) -> torch.Tensor:
        """p, what the drafted tokens are checked against and the correction and bonus come from.

        Args:
            logits: the target's logits (V,) at one position, in any float precision.

        Returns:
            p (V,), float32.
        """
        ...

    def draft_token(self, draft_probs: torch.Tensor, generator: torch.Generator) -> int:
        """The token the draft proposes.

        Args:
            draft_probs: q (V,).
            generator: the run's random stream (a stochastic rule draws from it).

        Returns:
            argmax q, or a draw x ~ q under a stochastic rule.
        """
        ...

    def check(
        self, token: int, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator | None
    ) -> Verdict:
        """Accept or reject one drafted token (speculative sampling: accept iff u < min(1, p(x) / q(x)), u ~ U(0, 1);
        Leviathan et al. 2023, Alg. 1).

        Args:
            token: the drafted token x.
            target_probs: p (V,) after the tokens before x.
            draft_probs: q (V,), the distribution x was drawn from.
            generator: the run's random stream (a stochastic rule draws its u from it: exactly one draw per check);
                None where a deterministic rule is asked without a run.

        Returns:
            The :class:`Verdict`: accepted, the probability of acceptance, and the rule's own details.
        """
        ...

    def acceptance_alpha(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> float:
        """α at this position: the probability the rule accepts a fresh draft (each rule's own: Leviathan et al.
        2023, Sec. 3.1, for sampling).

        Args:
            target_probs: p (V,).
            draft_probs: q (V,).

        Returns:
            α in [0, 1].
        """
        ...

    def candidates(self, target_probs: torch.Tensor) -> tuple[int, ...] | None:
        """The target's tokens a draft may be at this position, when the rule has such a list.

        Args:
            target_probs: p (V,).

        Returns:
            The token ids, most likely first (top-β: the target's β best), or None for a rule without a list.
        """
        ...

    def correction_distribution(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
        """What the target emits from after rejecting a token drawn from ``draft_probs`` (``correction_source``).

        Args:
            target_probs: p (V,) at the rejected position (in a tree: the walk's p at the last sibling).
            draft_probs: q (V,) the rejected token was drawn from.

        Returns:
            A distribution (V,): the residual norm(max(0, p - q)) under speculative sampling, p itself otherwise.
        """
        ...

    def correction(self, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator) -> int:
        """The token emitted from :meth:`correction_distribution` (argmax, or one draw from ``generator``).

        Args:
            target_probs: p (V,) at the rejected position.
            draft_probs: q (V,) the rejected token was drawn from.
            generator: the run's random stream.

        Returns:
            The correction's token id.
        """
        ...

    def bonus(self, target_probs: torch.Tensor, generator: torch.Generator) -> int:
        """The token emitted from p after a fully accepted proposal (the target alone emits so too).

        Args:
            target_probs: p (V,) after the last accepted token.
            generator: the run's random stream.

        Returns:
            The bonus's token id: argmax p, or a draw from p under a stochastic rule.
        """
        ...

    def next_sibling(
        self, target_probs: torch.Tensor, draft_probs: torch.Tensor, rejected: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The (p, q) a tree's next sibling is checked against once ``rejected`` (drawn from ``draft_probs``) was
        rejected: recursive rejection sampling's (p_{k+1}, q_{k+1}) (Jeon et al. 2024), or the same (p, q).

        Args:
            target_probs: p_k (V,), what the rejected sibling was checked against.
            draft_probs: q_k (V,), what it was drawn from.
            rejected: the rejected sibling's token x_k.

        Returns:
            (p_{k+1}, q_{k+1}), each (V,): under speculative sampling norm(max(0, p_k - q_k)) and q_k without x_k.
        """
        ...


class RuleModule(Protocol):
    """What a rule's module provides, ``build(settings)`` (the registry imports it on first use)."""

    def build(self, settings: Any) -> Rule:
        """The rule from its own settings group.

        Args:
            settings: the rule's settings group (its registry entry's ``settings``), None for a rule without one.

        Returns:
            The :class:`Rule`.
        """
        ...


class ArgmaxRule(ABC):
    """What the deterministic rules share (greedy, top-β + τ): the draft proposes argmax q; the target emits argmax p
    as the correction (from p itself) and as the bonus; a rejected sibling leaves p and q as they were. A subclass
    writes its ``check``."""

    stochastic = False
    correction_source = TARGET

    @abstractmethod
    def check(
        self, token: int, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator | None
    ) -> Verdict: ...

    def draft_distribution(self, logits: torch.Tensor) -> torch.Tensor:
        return softmax32(logits)

    def target_distribution(self, logits: torch.Tensor) -> torch.Tensor:
        return softmax32(logits)

    def draft_token(self, draft_probs: torch.Tensor, generator: torch.Generator) -> int:
        return int(torch.argmax(draft_probs))

    def acceptance_alpha(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> float:
        """The q-mass of the tokens that pass ``check``: the draft proposes argmax q deterministically, so 1 if
        argmax q passes, else 0 (greedy: argmax q = argmax p; top-β: argmax q is in the target's top β within τ)."""
        token = int(torch.argmax(draft_probs))
        return 1.0 if self.check(token, target_probs, draft_probs, None).accepted else 0.0

    def candidates(self, target_probs: torch.Tensor) -> tuple[int, ...] | None:
        return None

    def correction_distribution(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
        return target_probs

    def correction(self, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator) -> int:
        return int(torch.argmax(target_probs))

    def bonus(self, target_probs: torch.Tensor, generator: torch.Generator) -> int:
        return int(torch.argmax(target_probs))

    def next_sibling(
        self, target_probs: torch.Tensor, draft_probs: torch.Tensor, rejected: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return target_probs, draft_probs


def check_block(
    rule: Rule,
    token_ids: list[int],
    target_probs: Iterable[torch.Tensor],
    draft_probs: Iterable[torch.Tensor],
    generator: torch.Generator | None,
) -> list[Verdict | None]:
    """Check drafted tokens left to right and stop at the first rejection (Leviathan et al. 2023, Alg. 1):
    one verdict per token, None for the tokens after a rejection (never checked). The one walk the
    engine and the compare-rules page share."""
    verdicts: list[Verdict | None] = []
    rejected = False
    for token, p, q in zip(token_ids, target_probs, draft_probs):
        verdict = None if rejected else rule.check(token, p, q, generator)
        rejected = verdict is None or not verdict.accepted
        verdicts.append(verdict)
    return verdicts
