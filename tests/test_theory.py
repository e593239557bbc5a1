"""Closed forms against independent computations: a Monte-Carlo simulation and a direct sum."""

import random

import pytest

from specviz.config import DecodeConfig
from specviz.engine import autoregressive_decode
from specviz.rules.theory import best_gamma, expected_speedup, expected_speedup_for_blocks, expected_tokens_per_round

from .conftest import target_greedy


def simulated_tokens_per_round(alpha: float, gamma: int, rounds: int, rng: random.Random) -> float:
    """Accept each of gamma drafted tokens with probability alpha until the first rejection, +1 token."""
    total = 0
    for _ in range(rounds):
        accepted = 0
        while accepted < gamma and rng.random() < alpha:
            accepted += 1
        total += accepted + 1
    return total / rounds


@pytest.mark.parametrize("alpha,gamma", [(0.3, 2), (0.6, 4), (0.8, 8), (0.95, 3)])
def test_expected_tokens_per_round_matches_simulation(alpha, gamma):
    simulated = simulated_tokens_per_round(alpha, gamma, 40_000, random.Random(0))
    assert expected_tokens_per_round(alpha, gamma) == pytest.approx(simulated, rel=0.02)
    # the same quantity as a direct sum: sum_{i=0..gamma} alpha^i
    assert expected_tokens_per_round(alpha, gamma) == pytest.approx(sum(alpha**i for i in range(gamma + 1)))


def test_speedup_and_best_gamma():
    assert expected_tokens_per_round(1.0, 4) == 5
    assert expected_speedup(0.8, 4, 0.0) == pytest.approx(expected_tokens_per_round(0.8, 4))
    # a free draft with perfect acceptance: the longest block wins; an expensive draft: the shortest
    assert best_gamma(0.99, 0.0, 16) == 16
    assert best_gamma(0.3, 1.0, 16) == 1
    g = best_gamma(0.8, 0.05, 16)
    assert all(expected_speedup(0.8, g, 0.05) >= expected_speedup(0.8, k, 0.05) for k in range(1, 17))


def test_the_speedup_can_predict_verification_at_its_measured_cost():
    alpha, c = 0.6, 0.1
    # v = 1: Thm. 3.8
    assert expected_speedup_for_blocks(alpha, [3, 3], c) == pytest.approx(expected_speedup(alpha, 3, c))
    # a pass over 4 tokens costing 1.4 one-token steps: (1 - a^4) / (1 - a) over (3c + 1.4)
    assert expected_speedup_for_blocks(alpha, [3], c, {3: 1.4}) == pytest.approx(
        (1 - alpha**4) / (1 - alpha) / (3 * c + 1.4)
    )
    assert expected_speedup_for_blocks(alpha, [1, 3], c, {3: 1.4}) == pytest.approx(
        (expected_tokens_per_round(alpha, 1) + expected_tokens_per_round(alpha, 3)) / (c + 1 + 3 * c + 1.4)
    )


def test_autoregressive_baseline_is_the_targets_greedy(tiny_dirs, tiny_pair):
    config = DecodeConfig(target=tiny_dirs["target"], drafter="ngram", max_new_tokens=20, device="cpu")
    ids, seconds = autoregressive_decode(config, tiny_pair, [3, 7, 5, 9])
    assert ids == target_greedy(tiny_pair.target, [3, 7, 5, 9], 20) and seconds > 0
