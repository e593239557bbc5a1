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
``sample_sequences`` decodes N short continuations per arm with independent seeds per arm.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from scipy.stats import chi2, chi2_contingency, chisquare, ncx2

from specviz.analysis.common import Progress, decoding_seconds, units_in_budget
from specviz.config import DecodeConfig
from specviz.drafters.base import DraftBlock
from specviz.drafters.modules import make_drafter
from specviz.drafters.registry import drafter_entry
from specviz.engine import ModelPair, autoregressive_decode, speculative_decode
from specviz.models.forwards import KVCachedSequence, full_forward, states_forward
from specviz.rules.acceptance import Rule
from specviz.rules.registry import SAMPLING, rule_for
from specviz.rules.sampling import build_broken

LAB_SAMPLES_MAX = 100_000  # exact-law arm: vectorised draws, no model call per sample
SEQUENCE_SAMPLES_MIN, SEQUENCE_SAMPLES_MAX = 10, 300  # real decoding per arm
SEQUENCE_TOKENS_MAX = 3
ARMS = ("speculative sampling", "target sampling", "broken rule")
ARM_SEED_STRIDE = 1_000_003  # arm a uses seeds a * stride + s: no two arms share a random stream
MIN_EXPECTED = 5  # chi-square bins with fewer expected counts are pooled (Cochran's rule)


def sampling(config: DecodeConfig) -> DecodeConfig:
    """``config`` under speculative sampling: the rule whose output the lab tests against the target's p."""
    return config.replace(rule=SAMPLING)


def lab_rules(config: DecodeConfig) -> dict[str, Rule]:
    """The correct and the broken sampler, both with the config's temperature, top-k and top-p."""
    return {"speculative sampling": rule_for(sampling(config)), "broken rule": build_broken(config)}


@dataclass(frozen=True)
class DraftedPosition:
    """p and q (warped, float32) where the drafter makes its first drafted token."""

    context: list[int]  # the prompt, plus the target's top token for parallel drafters (they draft from round 2)
    target_probs: torch.Tensor
    draft_probs: torch.Tensor | None  # None: the drafter proposes nothing here (n-gram without a match)


def first_drafted_position(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int]) -> DraftedPosition:
    """The target's p and the drafter's q at its first drafted token, as the engine computes them.

    Parallel drafters read the target's states, which exist only after a first verification, so they
    first draft at the prompt plus one token; the lab fixes that token to the target's most likely one.
    Tree drafters draw their first level from the draft model (or the layer-skip draft) at the prompt.
    """
    config = drafter_entry(config.drafter).chain_config(sampling(config))
    rule = rule_for(config)
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


def sequence_seconds(samples: int, tokens: int, target_step_ms: float) -> float:
    """What :func:`sample_sequences` costs, priced from the machine profile: per sample and arm one short decode,
    about ``tokens`` + 2 target steps (the prompt's pass and the extra drafted token included)."""
    return decoding_seconds(samples * len(ARMS), tokens + 2, target_step_ms)


def default_sequence_samples(tokens: int, target_step_ms: float) -> int:
    """The decodes per arm a press runs by default: as many tens as :data:`BUTTON_BUDGET_S` holds on this machine,
    within the slider's range (more samples give the test more power; the page says how long they take)."""
    return 10 * units_in_budget(sequence_seconds(10, tokens, target_step_ms), SEQUENCE_SAMPLES_MIN // 10, 10)


def sample_sequences(
    config: DecodeConfig,
    pair: ModelPair,
    prompt_ids: list[int],
    samples: int,
    tokens: int,
    on_progress: Progress | None = None,
) -> pd.DataFrame:
    """``samples`` real decodes per arm of the first ``tokens`` tokens; arm a uses seeds a * stride + s.

    Speculative runs generate tokens + 1 so the first round really drafts at least ``tokens`` tokens.
    """
    samples, tokens = min(samples, SEQUENCE_SAMPLES_MAX), min(tokens, SEQUENCE_TOKENS_MAX)
    config = sampling(config).replace(max_new_tokens=tokens + 1, gamma=max(config.gamma, tokens))
    rules = lab_rules(config)
    rows = []
    for s in range(samples):
        for arm_index, arm in enumerate(ARMS):
            seeded = config.replace(seed=arm_index * ARM_SEED_STRIDE + s)
            if arm == "target sampling":
                ids = autoregressive_decode(seeded.replace(max_new_tokens=tokens), pair, prompt_ids)[0]
            else:
                ids = speculative_decode(seeded, prompt_ids=prompt_ids, pair=pair, rule=rules[arm]).output_ids
            rows += [dict(arm=arm, sample=s, position=i + 1, token_id=t) for i, t in enumerate(ids[:tokens])]
        if on_progress:
            on_progress(s + 1, samples)
    return pd.DataFrame(rows)


def two_sample_p(a: list[int], b: list[int]) -> float:
    """Chi-square test of homogeneity between two independent samples of token ids (sparse tokens pooled)."""
    ca, cb = Counter(a), Counter(b)
    tokens = [t for t in set(ca) | set(cb) if ca[t] + cb[t] >= 10]
    table = [
        [ca[t] for t in tokens] + [len(a) - sum(ca[t] for t in tokens)],
        [cb[t] for t in tokens] + [len(b) - sum(cb[t] for t in tokens)],
    ]
    table = [list(col) for col in zip(*table) if sum(col) > 0]
    if len(table) < 2:
        return 1.0
    return float(chi2_contingency(np.array(table).T)[1])
