"""SpecDec's relaxed verification (Xia et al. 2023, Sec. 3.2, "top-β + τ").

Accept a drafted token x if x is among the target's β most likely tokens AND log p(top1) - log p(x) <= τ. At the
first failure emit the target's top-1; after a fully accepted block emit the target's top-1 as the bonus (both
:class:`~specviz.rules.acceptance.ArgmaxRule`'s). β = 1 is greedy exact match; β > 1 is lossy by design (the output
may depart from the target's own greedy text).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specviz.registry.rule_settings import TopBetaSettings
from specviz.rules.acceptance import ArgmaxRule, Verdict


@dataclass(frozen=True)
class TopBetaRule(ArgmaxRule):
    """Top-β + τ with its two settings (:class:`~specviz.registry.rule_settings.TopBetaSettings`)."""

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


def build(settings: TopBetaSettings) -> TopBetaRule:
    return TopBetaRule(beta=settings.beta, tau=settings.tau)
