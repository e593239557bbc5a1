"""Probability vectors the rules work with: float32 softmax, the sampling warp, the residual, overlap,
and seeded draws (Gumbel-top-k without replacement, a uniform). Pure functions; no model code."""

from __future__ import annotations

import math

import torch


def softmax32(logits: torch.Tensor) -> torch.Tensor:
    """softmax in float32, whatever precision the model ran in."""
    return torch.softmax(logits.float(), dim=-1)


def sampling_distribution(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """The distribution a sampler draws from: softmax(logits / T), then top-k, then top-p (nucleus).

    Applied identically to p and q before any acceptance ratio (so the rule stays exact for the
    warped target). ``temperature == 0`` is the limit T -> 0: a one-hot vector on the argmax.
    Top-p keeps the smallest set of most likely tokens whose mass reaches ``top_p``
    (Holtzman et al. 2020), always at least one token.
    """
    logits = logits.float()
    if temperature == 0:
        return one_hot(int(torch.argmax(logits)), logits.shape[-1])
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop = mass_before >= top_p  # tokens whose predecessors already reach the nucleus mass
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum()
    return probs


def one_hot(token_id: int, vocab_size: int) -> torch.Tensor:
    """A deterministic distribution: all mass on ``token_id`` (the q of a model-free drafter)."""
    probs = torch.zeros(vocab_size, dtype=torch.float32)
    probs[token_id] = 1.0
    return probs


def residual_distribution(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): what the target still owes after the draft's proposal was rejected.

    Leviathan et al. 2023, Alg. 1 / Chen et al. 2023: sampling the correction from this residual makes
    the emitted token exactly p-distributed. If p == q the residual is empty; rejection then has
    probability zero, and p itself is returned so callers never divide by zero.
    """
    residual = torch.clamp(target_probs - draft_probs, min=0.0)
    total = residual.sum()
    if total <= 0:
        return target_probs.clone()
    return residual / total


def without_token(draft_probs: torch.Tensor, token: int) -> torch.Tensor:
    """q with a drawn sibling removed and renormalised: the law of the next draw without replacement (RSD's
    q_{k+1}, Jeon et al. 2024)."""
    rest = draft_probs.clone()
    rest[token] = 0.0
    total = rest.sum()
    return rest / total if total > 0 else rest


def overlap(target_probs: torch.Tensor, draft_probs: torch.Tensor) -> float:
    """sum_x min(p(x), q(x)): the probability speculative sampling accepts a fresh draft token.

    Its mean over positions estimates alpha in E[tokens per round] = (1 - alpha^(gamma+1)) / (1 - alpha)
    (Leviathan et al. 2023, Sec. 3.1 and Thm. 3.8).
    """
    return float(torch.minimum(target_probs, draft_probs).sum())


def gumbel_top_k(probs: torch.Tensor, k: int, generator: torch.Generator) -> list[int]:
    """k distinct token ids drawn WITHOUT replacement from ``probs``, in draw order.

    Gumbel-top-k trick (Vieira 2014; Kool et al. 2019): perturb log p with i.i.d. Gumbel(0, 1) noise
    and keep the k largest; the i-th is distributed as the i-th draw of sequential sampling without
    replacement. One draw (k = 1) is :func:`sample`, so a tree with one child per node consumes exactly
    the draws the chain does. The noise comes from a seeded CPU generator, so draws are the same on any
    device.
    """
    if k == 1:
        return [sample(probs, generator)]
    probs = probs.detach().double().cpu()
    uniform01 = torch.rand(probs.shape, generator=generator, dtype=torch.float64).clamp_(1e-300, 1.0)
    keys = torch.log(probs) - torch.log(-torch.log(uniform01))  # log p + Gumbel noise; -inf where p = 0
    k = min(k, int((probs > 0).sum()))
    return [int(i) for i in torch.topk(keys, k).indices]


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token id drawn from ``probs`` by inversion: the first id whose cumulative probability
    exceeds u * total, u ~ U[0, 1) (float64). One uniform per draw, where the Gumbel-max trick needs one
    per vocabulary entry (49,152 here) and three logarithms of each. An id with probability 0 is never
    drawn (its cumulative sum equals its predecessor's)."""
    cdf = torch.cumsum(probs.detach().double().cpu(), dim=0)
    u = uniform(generator) * float(cdf[-1])
    drawn = int(torch.searchsorted(cdf, torch.tensor([u], dtype=torch.float64), right=True)[0])
    return drawn if drawn < len(cdf) else int(torch.nonzero(probs).max())  # u * total rounded up to the total


def uniform(generator: torch.Generator) -> float:
    return float(torch.rand((), generator=generator, dtype=torch.float64))
