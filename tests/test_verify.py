"""The rules on hand-built distributions; each expected outcome is worked out in a comment."""

import math

import pytest
import torch

from specviz.rules.distributions import overlap, residual_distribution, sampling_distribution
from specviz.rules.greedy import GreedyRule
from specviz.rules.sampling import SpeculativeSamplingRule
from specviz.rules.top_beta import TopBetaRule

P = torch.tensor([0.5, 0.3, 0.15, 0.05])  # target
Q = torch.tensor([0.2, 0.6, 0.15, 0.05])  # draft
GEN = torch.Generator().manual_seed(0)


def test_residual_sums_to_one_and_is_zero_where_draft_covers_target():
    residual = residual_distribution(P, Q)
    # max(0, p - q) = [0.3, 0, 0, 0] -> normalised [1, 0, 0, 0]
    assert torch.allclose(residual, torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert math.isclose(float(residual.sum()), 1.0, abs_tol=1e-6)
    assert torch.all(residual[Q >= P] == 0)


def test_residual_of_random_distributions():
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        p = torch.softmax(torch.randn(50, generator=gen) * 2, -1)
        q = torch.softmax(torch.randn(50, generator=gen) * 2, -1)
        r = residual_distribution(p, q)
        assert math.isclose(float(r.sum()), 1.0, abs_tol=1e-5)
        assert torch.all(r[q >= p] == 0)
        assert torch.all(r[q < p] > 0)


def test_overlap_is_sum_of_minimum():
    # min(p, q) = [0.2, 0.3, 0.15, 0.05] -> 0.7
    assert math.isclose(overlap(P, Q), 0.7, abs_tol=1e-6)


def test_greedy_accepts_only_the_target_argmax():
    rule = GreedyRule()
    assert rule.check(0, P, Q, GEN).accepted  # token 0 is argmax p
    assert not rule.check(1, P, Q, GEN).accepted  # token 1 is the draft's argmax, not the target's
    assert rule.correction(P, Q, GEN) == 0 and rule.bonus(P, GEN) == 0


def test_speculative_sampling_acceptance_probability():
    rule = SpeculativeSamplingRule()
    # token 1: p/q = 0.3/0.6 = 0.5 ; token 0: p/q = 2.5 -> min(1, .) = 1
    assert math.isclose(rule.check(1, P, Q, GEN).accept_prob, 0.5, rel_tol=1e-6)
    verdict = rule.check(0, P, Q, GEN)
    assert verdict.accept_prob == 1.0 and verdict.accepted and 0 <= verdict.uniform < 1
    # the correction after rejecting token 1 comes from the residual [1, 0, 0, 0]: always token 0
    assert {rule.correction(P, Q, GEN) for _ in range(20)} == {0}


def test_speculative_sampling_accepts_at_rate_p_over_q():
    rule = SpeculativeSamplingRule()
    gen = torch.Generator().manual_seed(3)
    accepted = sum(rule.check(1, P, Q, gen).accepted for _ in range(4000))
    assert abs(accepted / 4000 - 0.5) < 0.03  # 4 sigma of a Binomial(4000, 0.5) is 0.032


def test_top_beta_candidates_and_tau():
    # beta=3: candidates {0, 1, 2}; token 2: gap = log .5 - log .15 = 1.204
    verdict = TopBetaRule(beta=3, tau=5.0).check(2, P, Q, GEN)
    assert verdict.accepted and verdict.candidates == (0, 1, 2)
    assert math.isclose(verdict.tau_gap, math.log(0.5 / 0.15), rel_tol=1e-5)
    assert not TopBetaRule(beta=3, tau=1.0).check(2, P, Q, GEN).accepted  # gap 1.2 > tau 1.0
    assert not TopBetaRule(beta=2, tau=5.0).check(2, P, Q, GEN).accepted  # not in the top 2


def test_top_beta_with_beta_one_is_greedy():
    gen = torch.Generator().manual_seed(5)
    for _ in range(20):
        p = torch.softmax(torch.randn(30, generator=gen), -1)
        for token in range(30):
            assert (
                TopBetaRule(beta=1, tau=100.0).check(token, p, p, gen).accepted
                == GreedyRule().check(token, p, p, gen).accepted
            )


def test_sampling_distribution_warps():
    logits = torch.log(P)
    assert torch.allclose(sampling_distribution(logits, 1.0, 0, 1.0), P, atol=1e-6)
    # top-k 2 keeps [0.5, 0.3] -> [0.625, 0.375]
    assert torch.allclose(sampling_distribution(logits, 1.0, 2, 1.0), torch.tensor([0.625, 0.375, 0, 0]), atol=1e-6)
    # top-p 0.6: 0.5 alone is short of 0.6, so 0.3 joins; nothing else -> same as top-k 2
    assert torch.allclose(sampling_distribution(logits, 1.0, 0, 0.6), torch.tensor([0.625, 0.375, 0, 0]), atol=1e-6)
    # T = 0 is argmax
    assert sampling_distribution(logits, 0.0, 0, 1.0).tolist() == [1.0, 0.0, 0.0, 0.0]
    # T = 2 flattens: p^(1/2) normalised
    flat = torch.sqrt(P) / torch.sqrt(P).sum()
    assert torch.allclose(sampling_distribution(logits, 2.0, 0, 1.0), flat, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_probabilities_are_float32_from_half_logits(dtype):
    logits = torch.randn(100).to(dtype)
    for rule in (GreedyRule(), SpeculativeSamplingRule(), TopBetaRule()):
        assert rule.target_distribution(logits).dtype == torch.float32
        assert rule.draft_distribution(logits).dtype == torch.float32
