"""Why the draft may be cheap: the target decides. One prompt decoded greedily with the draft in each precision.

The draft only proposes; the target's argmax (greedy) or the rule's test against p (sampling) decides every token
(Leviathan et al. 2023, Sec. 2.3: speculative sampling is exact for ANY q, because the rule uses the q the token
was drawn from). So a coarser draft, bfloat16 or int8, changes how often its tokens are accepted (α) and what a
drafted token costs (c), never the output: in float32 the speculative text stays the target's own greedy text. What
"exact" means is the target's precision alone. Pure data in, plain data out; no streamlit.
"""

from __future__ import annotations

from dataclasses import dataclass

from specviz import limits
from specviz.analysis.roofline import cost_coefficient, pair_profiles
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, speculative_decode
from specviz.models.loading import QUANTISATIONS
from specviz.registry.rules import GREEDY
from specviz.rules.theory import expected_speedup
from specviz.runtime.machine import resolve_device
from specviz.runtime.protocol import first_difference

DRAFT_PRECISIONS = tuple(d for d in limits.DRAFT_DTYPES if d)  # the draft model's own precisions (None: the target's)


def precisions_on(device: str, precisions: tuple[str, ...] = DRAFT_PRECISIONS) -> tuple[str, ...]:
    """Those of ``precisions`` (by default the draft's) that run on ``device`` ("auto", "cpu", "cuda:0"...): int8
    needs a CPU, int4 a CPU where its C kernel compiles."""
    resolved = resolve_device(device)
    return tuple(d for d in precisions if d not in QUANTISATIONS or QUANTISATIONS[d].runs_on(resolved))


@dataclass(frozen=True)
class DraftPrecisionRow:
    """One draft precision on one prompt, greedy, beside the target's own decoding."""

    draft_dtype: str
    cost_ratio: float  # c: the draft's step over the target's, from their profiles on this machine
    alpha: float  # the draft's greedy acceptance on this prompt (the trace's estimate of α)
    tokens_per_round: float  # new tokens per target pass in this run
    predicted_speedup: float  # Thm. 3.8 at this α, c and γ, predicted at this machine's v(γ)
    matching: int  # new tokens identical to the target's own greedy before the first difference
    total: int  # the target's own greedy new tokens

    @property
    def identical(self) -> bool:
        return self.matching == self.total


def draft_precision_row(
    config: DecodeConfig, pair: ModelPair, prompt_ids: list[int], reference: list[int]
) -> DraftPrecisionRow:
    """Decode ``prompt_ids`` greedily with ``pair`` (its draft in ``config.draft_precision``) and compare with the
    target's own greedy ``reference``; c from the pair's profiles, α from the run."""
    config = config.replace(rule=GREEDY)
    trace = speculative_decode(config, prompt_ids=prompt_ids, pair=pair)
    assert trace.stats is not None, "a finished trace carries its statistics"
    target, draft = pair_profiles(config, pair)
    assert draft is not None, "the draft model has a forward of its own"
    c, alpha = cost_coefficient(target, draft), trace.stats.alpha_estimate
    difference = first_difference(reference, trace.output_ids)
    return DraftPrecisionRow(
        draft_dtype=config.draft_precision,
        cost_ratio=c,
        alpha=alpha,
        tokens_per_round=trace.stats.mean_tokens_per_round,
        predicted_speedup=expected_speedup(alpha, config.gamma, c, target.verify_cost(config.gamma)),
        matching=len(reference) if difference is None else difference,
        total=len(reference),
    )
