"""Greedy exact match: accept while the drafted token is argmax p; emit argmax p otherwise.

The output is token-identical to the target's own greedy decoding (Leviathan et al. 2023, Sec. 2.3 with T -> 0;
Xia et al. 2023 with beta = 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.rules.acceptance import ArgmaxRule, Verdict


@dataclass(frozen=True)
class GreedyRule(ArgmaxRule):
    """Accept x ⇔ x = argmax p; the correction and the bonus are argmax p (:class:`ArgmaxRule`)."""

    def check(
        self, token: int, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator | None
    ) -> Verdict:
        accepted = token == int(torch.argmax(target_probs))
        return Verdict(accepted=accepted, accept_prob=1.0 if accepted else 0.0)


def build(settings: None = None) -> GreedyRule:
    """Greedy has no settings group."""
    return GreedyRule()
