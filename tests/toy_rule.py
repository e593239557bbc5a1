"""A toy rule added through the registry alone (tests/test_toy_rule.py): cautious greedy accepts a drafted token only
when it is the target's argmax AND the target gives it at least :data:`CONFIDENCE`; otherwise it emits argmax p. So
its output is still the target's own greedy text, with fewer tokens accepted. Its module is this file (the
:class:`~specviz.rules.acceptance.RuleModule` protocol: ``build(settings)``); it has no settings; its registry line is
:data:`ENTRY`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specviz.registry.rules import RuleEntry
from specviz.rules.acceptance import ArgmaxRule, Verdict

CONFIDENCE = 0.5  # p(argmax) a drafted token needs to be accepted


@dataclass(frozen=True)
class CautiousGreedyRule(ArgmaxRule):
    def check(
        self, token: int, target_probs: torch.Tensor, draft_probs: torch.Tensor, generator: torch.Generator | None
    ) -> Verdict:
        best = int(torch.argmax(target_probs))
        accepted = token == best and float(target_probs[best]) >= CONFIDENCE
        return Verdict(accepted=accepted, accept_prob=1.0 if accepted else 0.0)


def build(settings: None) -> CautiousGreedyRule:
    """The toy rule has no settings group: the registry passes None."""
    return CautiousGreedyRule()


ENTRY = RuleEntry(
    "cautious",
    "cautious greedy (toy)",
    "accept the target's argmax only where p(argmax) ≥ 1/2: a test's toy rule",
    "tests.toy_rule",
    lossless=True,
    correction="target's choice (argmax p), cautiously",
    bonus="bonus: target's choice (argmax p)",
    alpha="α = share of verified positions where argmax q = argmax p and p(argmax) ≥ 1/2",
    formula="Cautious greedy: accept x̃ᵢ ⇔ x̃ᵢ = argmax p and p(x̃ᵢ) ≥ 1/2; else emit argmax p.",
)
