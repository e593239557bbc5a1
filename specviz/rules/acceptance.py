"""Verification rules: pure functions over float32 probability vectors.

Convention (Leviathan et al. 2023): ``p`` / ``target_probs`` is the target's distribution and
``q`` / ``draft_probs`` the draft's, both over the same vocabulary, both float32 and summing to one.
Each rule answers three questions for one round: how the draft picks a token from its logits,
whether a drafted token is accepted, and what token the target emits at the first rejection
(correction) or after a fully accepted block (bonus).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from specviz.rules.distributions import (
    overlap,
    residual_distribution,
    sample,
    sampling_distribution,
    softmax32,
    uniform,
)

if TYPE_CHECKING:
    from specviz.config import DecodeConfig


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one drafted token."""

    accepted: bool
    accept_prob: float  # probability the rule accepts this token (1/0 for deterministic rules)
    uniform: float | None = None  # the draw u compared with accept_prob (speculative sampling)
    tau_gap: float | None = None  # log p(top1) - log p(token) (top-beta rule)
    candidates: tuple[int, ...] = ()  # the target's beta best token ids (top-beta rule)


class Rule(Protocol):
    """A verification rule (one round's three questions): how the draft picks a token, whether a drafted token is
    accepted, and what the target emits at the first rejection (correction) or after a fully accepted block
    (bonus). Probabilities are float32 and over the same vocabulary."""

    @property
    def name(self) -> str: ...

    @property
    def stochastic(self) -> bool: ...

    def draft_distribution(self, logits: torch.Tensor) -> torch.Tensor: ...

    def target_distribution(self, logits: torch.Tensor) -> torch.Tensor: ...

    def draft_token(self, draft_probs: torch.Tensor, generator: torch.Generator) -> int: ...

    def check(
        self, token: int, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator | None
    ) -> Verdict: ...

    def acceptance_alpha(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> float: ...

    def candidates(self, target_probs: torch.Tensor) -> tuple[int, ...] | None: ...

    def correction(self, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator) -> int: ...

    def bonus(self, target_probs: torch.Tensor, generator: torch.Generator) -> int: ...


@dataclass(frozen=True)
class GreedyRule:
    """Greedy exact match: accept while the draft token is argmax p; emit argmax p otherwise.

    The output is token-identical to the target's own greedy decoding (Leviathan et al. 2023, Sec. 2.3
    with T -> 0; Xia et al. 2022 with beta = 1).
    """

    name: str = "greedy"
    stochastic: bool = False

    def draft_distribution(self, logits: torch.Tensor) -> torch.Tensor:
        return softmax32(logits)

    def target_distribution(self, logits: torch.Tensor) -> torch.Tensor:
        return softmax32(logits)

    def draft_token(self, draft_probs: torch.Tensor, generator: torch.Generator) -> int:
        return int(torch.argmax(draft_probs))

    def check(
        self, token: int, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator | None
    ) -> Verdict:
        accepted = token == int(torch.argmax(target_probs))
        return Verdict(accepted=accepted, accept_prob=1.0 if accepted else 0.0)

    def acceptance_alpha(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> float:
        """alpha here: the probability this rule accepts a fresh draft at this position, i.e. the q-mass
        of the tokens that pass ``check``. The draft proposes argmax q deterministically, so that is 1 if
        argmax q passes, else 0. Greedy: argmax q = argmax p. Top-beta (inherits this): argmax q is in
        the target's top beta and within tau of its top-1."""
        token = int(torch.argmax(draft_probs))
        return 1.0 if self.check(token, target_probs, draft_probs, None).accepted else 0.0

    def candidates(self, target_probs: torch.Tensor) -> tuple[int, ...] | None:
        """The target's tokens a draft may be at this position, when the rule has such a list."""
        return None

    def correction(self, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator) -> int:
        return int(torch.argmax(target_probs))

    def bonus(self, target_probs: torch.Tensor, generator: torch.Generator) -> int:
        return int(torch.argmax(target_probs))


@dataclass(frozen=True)
class SpeculativeSamplingRule:
    """Speculative sampling (Leviathan et al. 2023, Alg. 1; Chen et al. 2023, Alg. 2).

    Draw x ~ q; accept if u < min(1, p(x) / q(x)) with u ~ U(0, 1); at the first rejection emit a
    token from norm(max(0, p - q)) and stop; when every drafted token is accepted emit a bonus
    token from p. The emitted sequence is distributed exactly as sampling from p. Temperature,
    top-k and top-p are applied to both p and q, and the q in the ratio is the q x was drawn from.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    name: str = "sample"
    stochastic: bool = True

    def _warp(self, logits: torch.Tensor) -> torch.Tensor:
        return sampling_distribution(logits, self.temperature, self.top_k, self.top_p)

    def draft_distribution(self, logits: torch.Tensor) -> torch.Tensor:
        return self._warp(logits)

    def target_distribution(self, logits: torch.Tensor) -> torch.Tensor:
        return self._warp(logits)

    def draft_token(self, draft_probs: torch.Tensor, generator: torch.Generator) -> int:
        return sample(draft_probs, generator)

    def acceptance_alpha(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> float:
        """alpha here: P(accept x), x ~ q = sum_x q(x) min(1, p(x)/q(x)) = sum_x min(p(x), q(x)) over the
        warped p and q (Leviathan et al. 2023, Def. 3.1 and Thm. 3.5)."""
        return overlap(target_probs, draft_probs)

    def candidates(self, target_probs: torch.Tensor) -> tuple[int, ...] | None:
        return None

    def check(
        self, token: int, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator | None
    ) -> Verdict:
        assert generator is not None, "speculative sampling draws its u from the run's generator"
        p, q = float(target_probs[token]), float(draft_probs[token])
        accept_prob = 1.0 if q <= 0 else min(1.0, p / q)
        u = uniform(generator)
        return Verdict(accepted=u < accept_prob, accept_prob=accept_prob, uniform=u)

    def correction_distribution(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
        """What a rejection resamples from: the residual norm(max(0, p - q))."""
        return residual_distribution(target_probs, draft_probs)

    def correction(self, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator) -> int:
        return sample(self.correction_distribution(target_probs, draft_probs), generator)

    def bonus(self, target_probs: torch.Tensor, generator: torch.Generator) -> int:
        return sample(target_probs, generator)


@dataclass(frozen=True)
class TopBetaRule(GreedyRule):
    """SpecDec's relaxed verification (Xia et al. 2022, Sec. 3.2, "top-beta + tau").

    Accept a drafted token x if x is among the target's beta most likely tokens AND
    log p(top1) - log p(x) <= tau. At the first failure emit the target's top-1; after a fully
    accepted block emit the target's top-1 as the bonus (both inherited from greedy). beta = 1 is
    greedy exact match; beta > 1 is lossy by design (the output may depart from the target's own
    greedy text).
    """

    name: str = "topbeta"
    beta: int = 3
    tau: float = 5.0

    def candidates(self, target_probs: torch.Tensor) -> tuple[int, ...]:
        """The target's beta most likely tokens, most likely first."""
        return tuple(int(i) for i in torch.topk(target_probs, self.beta).indices)

    def check(
        self, token: int, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator | None
    ) -> Verdict:
        candidates = self.candidates(target_probs)
        tau_gap = math.log(float(target_probs[candidates[0]])) - math.log(max(float(target_probs[token]), 1e-45))
        accepted = token in candidates and tau_gap <= self.tau
        return Verdict(accepted=accepted, accept_prob=1.0 if accepted else 0.0, tau_gap=tau_gap, candidates=candidates)


@dataclass(frozen=True)
class BrokenResidualRule(SpeculativeSamplingRule):
    """A deliberately WRONG speculative sampler, for the losslessness lab: after a rejection it samples
    the correction from p instead of the residual norm(max(0, p - q)).

    The emitted token then has P(x) = min(p, q)(x) + (1 - sum min(p, q)) p(x), which over-weights the
    tokens the draft already favours: a bug a chi-square test against p can catch.
    """

    name: str = "broken-residual"

    def correction_distribution(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
        return target_probs


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


def greedy_rule(config: DecodeConfig) -> GreedyRule:
    return GreedyRule()


def sampling_rule(config: DecodeConfig) -> SpeculativeSamplingRule:
    return SpeculativeSamplingRule(temperature=config.temperature, top_k=config.top_k, top_p=config.top_p)


def top_beta_rule(config: DecodeConfig) -> TopBetaRule:
    return TopBetaRule(beta=config.beta, tau=config.tau)
