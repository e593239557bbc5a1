"""The losslessness lab's second part: real decodes, each position tested by a two-sample chi-square, and the power
that test has against the broken rule, computed before a decode runs.

From the second token on the context depends on earlier draws, so each sample is a real decode (the engine's loop,
the drafter's chain form, as in the first part). How often a test of N decodes catches the broken rule is the
noncentral chi-square's tail at the first position, where both laws are exact (:func:`first_position_laws`). The
broken rule errs only after a rejection, by re-adding the mass of the drafted token it just rejected: with a draft
that mostly agrees with the target (as the embedded pair's does on the default prompt) that error is a few hundredths
of total variation, and a test needs thousands of decodes to see it. So these decodes draft **confidently**, the draft's
logits at :data:`CONFIDENT_DRAFT` of the temperature: the rules stay what they are for any q they draw from
(Leviathan et al. 2023, Thm. 3.5: speculative sampling is exact for every q), and a confident draft is where the
broken rule's error is largest (p(d)(1 - p(d)) for a draft certain of d), so a hundred or two decodes catch it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from scipy.stats import chi2, chi2_contingency, ncx2

from specviz.analysis.common import decoding_seconds
from specviz.analysis.lab import ARM_SEED_STRIDE, ARMS, first_drafted_position, lab_rules, output_law, sampling
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, autoregressive_decode, speculative_decode
from specviz.limits import Progress
from specviz.registry.drafters import drafter_entry
from specviz.rules.acceptance import Rule

SEQUENCE_SAMPLES_MIN, SEQUENCE_SAMPLES_MAX = 10, 300  # real decoding per arm
SEQUENCE_TOKENS_MAX = 3
CONFIDENT_DRAFT = 0.1  # the draft's temperature as a share of the target's in these decodes (see the module)
POWER_TARGET = 0.9  # the default decodes catch the broken rule at least this often
LEVEL = 0.01  # the tests' level
POOLED_COUNT = 10  # a token seen fewer times in both samples together is pooled with the rest


def sequence_rules(config: DecodeConfig) -> dict[str, Rule]:
    """The correct and the broken sampler of these decodes: the config's warps, the draft confident."""
    return lab_rules(config, draft_temperature=sampling(config).temperature * CONFIDENT_DRAFT)


def decoded_config(config: DecodeConfig, tokens: int) -> DecodeConfig:
    """What each decode runs: the drafter's chain form under sampling, ``tokens`` + 1 new tokens (so the first round
    really drafts at least ``tokens``)."""
    chain = drafter_entry(config.drafter).chain_config(sampling(config))
    return chain.replace(max_new_tokens=tokens + 1, gamma=max(config.gamma, tokens))


def first_position_laws(
    config: DecodeConfig, pair: ModelPair, prompt_ids: list[int]
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(p, the broken rule's law) at the first drafted position of these decodes, exact (two passes, no sampling);
    None where the drafter proposes nothing there."""
    rules = sequence_rules(config)
    position = first_drafted_position(config, pair, prompt_ids, rules["broken rule"])
    if position.draft_probs is None:
        return None
    return position.target_probs, output_law(rules["broken rule"], position.target_probs, position.draft_probs)


def two_sample_power(null: torch.Tensor, alternative: torch.Tensor, n: int, level: float = LEVEL) -> float:
    """Power of :func:`two_sample_p` on n draws of each law: the noncentral chi-square with
    lambda = n sum (a - p)^2 / (a + p) over the tokens it keeps (n (a + p) >= :data:`POOLED_COUNT`; the rest one bin),
    df = bins - 1 (the homogeneity test of two equal samples, Cochran 1952)."""
    p, a = null.double().numpy(), alternative.double().numpy()
    keep = np.flatnonzero(n * (p + a) >= POOLED_COUNT)
    p_bins = np.append(p[keep], max(0.0, 1 - p[keep].sum()))
    a_bins = np.append(a[keep], max(0.0, 1 - a[keep].sum()))
    used = p_bins + a_bins > 0
    if used.sum() < 2:
        return 0.0
    lam = n * float(((a_bins[used] - p_bins[used]) ** 2 / (a_bins[used] + p_bins[used])).sum())
    df = int(used.sum()) - 1
    return float(ncx2.sf(chi2.ppf(1 - level, df), df, lam))


def power_by_decodes(laws: tuple[torch.Tensor, torch.Tensor] | None) -> Callable[[int], float] | None:
    """The power of these decodes' test at the first position as a function of the decodes per arm, from
    :func:`first_position_laws` (None where there is no drafted token to test)."""
    if laws is None:
        return None
    null, broken = laws
    return lambda samples: two_sample_power(null, broken, samples)


def default_sequence_samples(power: Callable[[int], float] | None) -> int:
    """The decodes per arm a press runs by default: the fewest tens whose ``power(n)`` against the broken rule reaches
    :data:`POWER_TARGET`, else the most the slider offers (and the page says the power is short)."""
    for samples in range(SEQUENCE_SAMPLES_MIN, SEQUENCE_SAMPLES_MAX + 1, 10):
        if power is not None and power(samples) >= POWER_TARGET:
            return samples
    return SEQUENCE_SAMPLES_MAX if power is not None else SEQUENCE_SAMPLES_MIN


def sequence_seconds(samples: int, tokens: int, target_step_ms: float) -> float:
    """What :func:`sample_sequences` costs, predicted from the machine profile: per sample and arm one short decode,
    about ``tokens`` + 2 target steps (the prompt's pass and the extra drafted token included)."""
    return decoding_seconds(samples * len(ARMS), tokens + 2, target_step_ms)


def sample_sequences(
    config: DecodeConfig,
    pair: ModelPair,
    prompt_ids: list[int],
    samples: int,
    tokens: int,
    on_progress: Progress | None = None,
) -> pd.DataFrame:
    """``samples`` real decodes per arm of the first ``tokens`` tokens (:func:`decoded_config`, the rules of
    :func:`sequence_rules`); arm a uses seeds a * stride + s."""
    samples, tokens = min(samples, SEQUENCE_SAMPLES_MAX), min(tokens, SEQUENCE_TOKENS_MAX)
    config, rules = decoded_config(config, tokens), sequence_rules(config)
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
    tokens = [t for t in set(ca) | set(cb) if ca[t] + cb[t] >= POOLED_COUNT]
    table = [
        [ca[t] for t in tokens] + [len(a) - sum(ca[t] for t in tokens)],
        [cb[t] for t in tokens] + [len(b) - sum(cb[t] for t in tokens)],
    ]
    table = [list(col) for col in zip(*table) if sum(col) > 0]
    if len(table) < 2:
        return 1.0
    return float(chi2_contingency(np.array(table).T)[1])
