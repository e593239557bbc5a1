"""The losslessness lab: does a rule preserve the target's distribution? Exact laws, samples, chi-square tests.

First drafted position (cheap and exact). At a fixed context the target's p and the draft's q are
fixed, so the law of the token a rule emits there has a closed form (Leviathan et al. 2023, Thm. 3.5):
    P(x) = min(p(x), q(x)) + (1 - sum_y min(p(y), q(y))) * c(x),
where c is what a rejection resamples from: the residual norm(max(0, p - q)) for speculative sampling
(then P = p exactly), p itself for the deliberately broken rule (then P over-weights tokens the draft
favours). ``simulate_rule`` draws N tokens from the rule itself, vectorised (x ~ q, u ~ U(0, 1), accept if
u < min(1, p(x)/q(x)), else a draw from c), so 10^4-10^5 samples cost milliseconds and no model call.
Each arm has its own random stream: two-sample and goodness-of-fit tests assume independent samples.

Later positions (M > 1) need the real decoder (the context then depends on earlier tokens):
:mod:`specviz.analysis.lab_sequences`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import chi2, chisquare, ncx2

from specviz.config import DecodeConfig
from specviz.drafters.base import DraftBlock
from specviz.drafters.modules import make_drafter
from specviz.engine import ModelPair
from specviz.registry.drafters import drafter_entry
from specviz.registry.rule_settings import SamplingSettings
from specviz.registry.rules import SAMPLING, rule_for
from specviz.rules.acceptance import Rule
from specviz.rules.sampling import build as build_sampling
from specviz.rules.sampling import build_broken
from specviz.runtime.protocol import KVCachedSequence
from specviz.runtime.reference import full_forward, states_forward

LAB_SAMPLES_MAX = 100_000  # exact-law arm: vectorised draws, no model call per sample
ARMS = ("speculative sampling", "target sampling", "broken rule")
ARM_SEED_STRIDE = 1_000_003  # arm a uses seeds a * stride + s: no two arms share a random stream
MIN_EXPECTED = 5  # chi-square bins with fewer expected counts are pooled (Cochran's rule)


def sampling(config: DecodeConfig) -> DecodeConfig:
    """``config`` under speculative sampling: the rule whose output the lab tests against the target's p."""
    return config.replace(rule=SAMPLING)


def lab_rules(config: DecodeConfig, draft_temperature: float | None = None) -> dict[str, Rule]:
    """The correct and the broken sampler, both with the config's temperature, top-k and top-p (and the draft at
    ``draft_temperature`` where given: both stay what they are for any q they draw from)."""
    return {
        "speculative sampling": build_sampling(config.settings(SamplingSettings), draft_temperature),
        "broken rule": build_broken(config.settings(SamplingSettings), draft_temperature),
    }


@dataclass(frozen=True)
class DraftedPosition:
    """p and q (warped, float32) where the drafter makes its first drafted token."""

    context: list[int]  # the prompt, plus the target's top token for parallel drafters (they draft from round 2)
    target_probs: torch.Tensor
    draft_probs: torch.Tensor | None  # None: the drafter proposes nothing here (n-gram without a match)


def first_drafted_position(
    config: DecodeConfig, pair: ModelPair, prompt_ids: list[int], rule: Rule | None = None
) -> DraftedPosition:
    """The target's p and the drafter's q at its first drafted token, as the engine computes them (under ``rule``,
    the config's by default).

    Parallel drafters read the target's states, which exist only after a first verification, so they
    first draft at the prompt plus one token; the lab fixes that token to the target's most likely one.
    Tree drafters draw their first level from the draft model (or the layer-skip draft) at the prompt.
    """
    config = drafter_entry(config.drafter).chain_config(sampling(config))
    rule = rule or rule_for(config)
    parallel = drafter_entry(config.drafter).requires_model_outputs
    state = KVCachedSequence()
    forward = states_forward if parallel else full_forward
    logits = state.feed(forward, pair.target, list(prompt_ids), 1)[-1, : pair.vocab_size]
    context = list(prompt_ids)
    if parallel:
        context.append(int(torch.argmax(logits)))
        logits = state.feed(states_forward, pair.target, context[-1:], 1)[-1, : pair.vocab_size]
    block = make_drafter(config, pair, state).propose(context, 1, rule, torch.Generator().manual_seed(config.seed))
    assert isinstance(block, DraftBlock), "a chain config's drafter proposes a block"
    q = block.draft_probs[0] if block.token_ids else None
    return DraftedPosition(context, rule.target_distribution(logits).cpu(), q)


def output_law(rule: Rule, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """P(x) = min(p, q)(x) + (1 - sum min(p, q)) c(x), c = the rule's correction distribution."""
    both = torch.minimum(p, q)
    return both + (1 - both.sum()) * rule.correction_distribution(p, q)


def simulate_rule(rule: Rule, p: torch.Tensor, q: torch.Tensor, n: int, seed: int) -> torch.Tensor:
    """n tokens emitted by the rule at one position, vectorised over samples (Leviathan et al. Alg. 1, one step):
    x ~ q; accept when u < min(1, p(x)/q(x)); otherwise emit a draw from the rule's correction distribution."""
    generator = torch.Generator().manual_seed(seed)
    drafted = torch.multinomial(q, n, replacement=True, generator=generator)  # (n,)
    accept_prob = torch.clamp(p[drafted] / q[drafted], max=1.0)
    accepted = torch.rand(n, generator=generator) < accept_prob
    fallback = torch.multinomial(rule.correction_distribution(p, q), n, replacement=True, generator=generator)
    return torch.where(accepted, drafted, fallback)


def pooled_bins(expected_probs: torch.Tensor, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids with at least MIN_EXPECTED expected counts among n draws, expected counts of every id);
    the ids left out are pooled into one bin by the tests."""
    expected = expected_probs.double().numpy() * n
    keep = np.flatnonzero(expected >= MIN_EXPECTED)
    return keep, expected


def goodness_of_fit(token_ids: list[int], probs: torch.Tensor) -> float:
    """Chi-square p-value of observed tokens against exact probabilities (rare tokens pooled into one bin)."""
    n = len(token_ids)
    counts = Counter(token_ids)
    keep, expected = pooled_bins(probs, n)
    observed = [counts.get(int(i), 0) for i in keep]
    expected_kept = expected[keep].tolist()
    rest_obs, rest_exp = n - sum(observed), n - sum(expected_kept)
    if rest_exp >= 1e-9:
        observed, expected_kept = observed + [rest_obs], expected_kept + [rest_exp]
    if len(observed) < 2:
        return 1.0
    expected_kept = np.asarray(expected_kept) * (sum(observed) / sum(expected_kept))
    return float(chisquare(observed, expected_kept).pvalue)


def chi_square_power(null: torch.Tensor, alternative: torch.Tensor, n: int, level: float = 0.01) -> float:
    """Power of the goodness-of-fit test above to reject ``null`` when samples follow ``alternative``:
    the noncentral chi-square with lambda = n sum_bins (a - p)^2 / p over the same pooled bins."""
    keep, _ = pooled_bins(null, n)
    p = null.double().numpy()
    a = alternative.double().numpy()
    p_bins = np.append(p[keep], max(0.0, 1 - p[keep].sum()))
    a_bins = np.append(a[keep], max(0.0, 1 - a[keep].sum()))
    used = p_bins > 0
    if used.sum() < 2:
        return 0.0
    lam = n * float(((a_bins[used] - p_bins[used]) ** 2 / p_bins[used]).sum())
    df = int(used.sum()) - 1
    return float(ncx2.sf(chi2.ppf(1 - level, df), df, lam))


@dataclass(frozen=True)
class ExactLab:
    """One position, three arms of n samples each, their exact laws and the chi-square results."""

    position: DraftedPosition
    samples: dict[str, list[int]]  # arm -> n token ids
    laws: dict[str, torch.Tensor]  # arm -> its exact output law
    p_values: dict[str, float]  # arm -> goodness of fit against the target's p
    broken_power: float  # chance the test rejects the broken rule at this n (1% level)
    n: int


def exact_lab(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int], n: int, seed: int = 0) -> ExactLab | None:
    """Sample the first drafted position n times per arm; None when the drafter proposes nothing there."""
    n = max(1, min(n, LAB_SAMPLES_MAX))
    position = first_drafted_position(config, pair, prompt_ids)
    p, q = position.target_probs, position.draft_probs
    if q is None:
        return None
    rules = lab_rules(config)
    laws = {arm: output_law(rules[arm], p, q) if arm in rules else p for arm in ARMS}  # target sampling's law: p
    samples = {}
    for arm_index, arm in enumerate(ARMS):
        arm_seed = arm_index * ARM_SEED_STRIDE + seed
        if arm in rules:
            ids = simulate_rule(rules[arm], p, q, n, arm_seed)
        else:  # target sampling: p itself
            ids = torch.multinomial(p, n, replacement=True, generator=torch.Generator().manual_seed(arm_seed))
        samples[arm] = ids.tolist()
    p_values = {arm: goodness_of_fit(ids, p) for arm, ids in samples.items()}
    return ExactLab(position, samples, laws, p_values, chi_square_power(p, laws["broken rule"], n), n)
