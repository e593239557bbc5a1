"""Speculative sampling (Leviathan et al. 2023, Alg. 1; Chen et al. 2023, Alg. 2), and the losslessness lab's
deliberately broken twin of it.

Draw x ~ q; accept if u < min(1, p(x) / q(x)) with u ~ U(0, 1); at the first rejection emit a token from
norm(max(0, p - q)) and stop; when every drafted token is accepted emit a bonus token from p. The emitted sequence
is distributed exactly as sampling from p. Temperature, top-k and top-p are applied to both p and q, and the q in
the ratio is the q x was drawn from. In a tree, a rejected sibling leaves the residual for the next one (recursive
rejection sampling, Jeon et al. 2024).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from specviz.registry.rule_settings import SamplingSettings
from specviz.rules.acceptance import RESIDUAL, TARGET, Verdict
from specviz.rules.distributions import (
    overlap,
    residual_distribution,
    sample,
    sampling_distribution,
    uniform,
    without_token,
)


@dataclass(frozen=True)
class SpeculativeSamplingRule:
    """Speculative sampling with the warps of :class:`~specviz.registry.rule_settings.SamplingSettings`."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    # the draft's own temperature where it differs from the target's (None: the same): the rule stays exact for any q
    # it draws from, and the losslessness lab drafts confidently so that a broken correction shows
    draft_temperature: float | None = None
    stochastic = True
    correction_source = RESIDUAL

    def draft_distribution(self, logits: torch.Tensor) -> torch.Tensor:
        temperature = self.temperature if self.draft_temperature is None else self.draft_temperature
        return sampling_distribution(logits, temperature, self.top_k, self.top_p)

    def target_distribution(self, logits: torch.Tensor) -> torch.Tensor:
        return sampling_distribution(logits, self.temperature, self.top_k, self.top_p)

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

    def next_sibling(
        self, target_probs: torch.Tensor, draft_probs: torch.Tensor, rejected: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """RSD's recursion: p_{k+1} = norm(max(0, p_k - q_k)), q_{k+1} = q_k without x_k, renormalised."""
        return residual_distribution(target_probs, draft_probs), without_token(draft_probs, rejected)


@dataclass(frozen=True)
class BrokenResidualRule(SpeculativeSamplingRule):
    """A deliberately WRONG speculative sampler, for the losslessness lab: after a rejection it samples
    the correction from p instead of the residual norm(max(0, p - q)), and its records say so (source: p); in a tree
    the next sibling of a rejected token is checked against p again instead of the residual.

    The emitted token then has P(x) = min(p, q)(x) + (1 - sum min(p, q)) p(x), which over-weights the
    tokens the draft already favours: a bug a chi-square test against p can catch.
    """

    correction_source = TARGET

    def correction_distribution(self, target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
        return target_probs

    def next_sibling(
        self, target_probs: torch.Tensor, draft_probs: torch.Tensor, rejected: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return target_probs, without_token(draft_probs, rejected)


def build(settings: SamplingSettings, draft_temperature: float | None = None) -> SpeculativeSamplingRule:
    """Speculative sampling with its warps (the draft at ``draft_temperature`` where given)."""
    return SpeculativeSamplingRule(**asdict(settings), draft_temperature=draft_temperature)


def build_broken(settings: SamplingSettings, draft_temperature: float | None = None) -> BrokenResidualRule:
    """The broken twin with the same warps (the lab's "broken rule" arm)."""
    return BrokenResidualRule(**asdict(settings), draft_temperature=draft_temperature)
