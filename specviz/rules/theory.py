"""Closed-form expectations for speculative decoding (Leviathan et al. 2023, Sec. 3).

With per-token acceptance rate alpha (assumed i.i.d. across positions), block size gamma and a
draft/target cost ratio c (time of one draft forward / time of one target forward):

  E[tokens per round] = (1 - alpha^(gamma+1)) / (1 - alpha)                      (Eq. 1)
  expected wall-time speedup = (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma*c + 1))   (Thm. 3.8)

alpha is the probability that the rule in use accepts a fresh draft token, estimated from a trace as
the mean over verified positions of each rule's own definition (rules.acceptance.Rule.acceptance_alpha):
speculative sampling sum_x min(p(x), q(x)); greedy 1[argmax q = argmax p]; top-beta + tau whether the
draft's token passes. A trace's rounds do not all draft gamma tokens (trees draft their depth, parallel
drafters min(gamma, k) and nothing in round 1, adaptive exit stops early, the last rounds are clipped
by max_new_tokens), so the ``*_for_blocks`` forms evaluate Eq. 1 at each round's realised block size k_r.
"""

from __future__ import annotations

from collections.abc import Mapping


def expected_tokens_per_round(alpha: float, gamma: int) -> float:
    """E[tokens per round] = (1 - alpha^(gamma+1)) / (1 - alpha); gamma + 1 when alpha = 1."""
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def expected_speedup(alpha: float, gamma: int, cost_ratio: float, verify_cost: float = 1.0) -> float:
    """Expected wall-time improvement over autoregressive decoding with the target alone: E[tokens per round] over
    gamma c + v (Leviathan et al. 2023, Thm. 3.8 with v = 1; ``verify_cost`` v predicts the target's pass over
    gamma + 1 tokens in one-token steps, as measured on a machine)."""
    return expected_tokens_per_round(alpha, gamma) / (gamma * cost_ratio + verify_cost)


def best_gamma(alpha: float, cost_ratio: float, gamma_max: int = 16) -> int:
    """The block size in 1..gamma_max with the highest expected speedup."""
    return max(range(1, gamma_max + 1), key=lambda g: expected_speedup(alpha, g, cost_ratio))


def expected_tokens_for_blocks(alpha: float, blocks: list[int]) -> float:
    """Mean over rounds of Eq. 1 at each round's realised block size k_r."""
    if not blocks:
        return 0.0
    return sum(expected_tokens_per_round(alpha, k) for k in blocks) / len(blocks)


def expected_speedup_for_blocks(
    alpha: float, blocks: list[int], cost_ratio: float, verify_cost: Mapping[int, float] | None = None
) -> float:
    """Expected tokens over expected cost, in target-forward units, for the realised blocks:
    sum_r E[tokens | k_r] / sum_r (k_r c + v(k_r)).

    v(k) is the cost of the target's one pass over k + 1 tokens (the k drafted ones and the token before
    them) in units of a one-token step. Thm. 3.8 takes v = 1: the pass over gamma + 1 tokens runs in
    parallel on compute that a one-token step leaves idle (Leviathan et al. 2023, Sec. 3.3-3.4). On a
    small CPU there is little idle compute and a pass over a few tokens can cost clearly more than a
    one-token step, so passing the measured v (:func:`specviz.analysis.cost.verification_costs`) predicts what
    this device pays.
    """
    if not blocks:
        return 0.0
    v = verify_cost or {}
    return sum(expected_tokens_per_round(alpha, k) for k in blocks) / sum(
        k * cost_ratio + v.get(k, 1.0) for k in blocks
    )
