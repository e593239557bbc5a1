"""What a race's speculative lane promises about its text, beside the target alone's: identical under greedy
float32 (Leviathan et al. 2023, Thm. 3.1 with the argmax rule) and to the int8 target as run in int8 (its products
are summed exactly, :mod:`specviz.models.int8`, and each row attends as one token would,
:mod:`specviz.models.row_attention`), identical up to rounding in half precision, the same distribution, not the
same text, under sampling, and no promise under a lossy rule."""

from __future__ import annotations

from specviz.config import DecodeConfig
from specviz.registry.rules import rule_entry, rule_for

EXACT_PRECISIONS = {
    "float32": "as greedy decoding in float32 guarantees",
    "int8": "to the int8 target as run (a coarser model than the float32 one), as its exact int32 sums and its "
    "attention one row at a time guarantee",
}


def common_prefix(reference: tuple[int, ...], ids: tuple[int, ...]) -> int:
    """How many leading tokens two outputs share."""
    same = 0
    for a, b in zip(reference, ids):
        if a != b:
            break
        same += 1
    return same


def verdict(config: DecodeConfig, reference: tuple[int, ...], ids: tuple[int, ...]) -> str:
    """How a speculative lane's text compares with the target alone's, and what the rule and precision promise."""
    same, total = common_prefix(reference, ids), max(len(reference), len(ids))
    if rule_for(config).stochastic:
        return (
            "Sampling: the same seed gives another text, because the speculative run draws its acceptance tests "
            "and the draft's tokens from the same random stream; what it preserves is the distribution of the text "
            "(the Losslessness lab tests it)."
        )
    if not rule_entry(config.rule).lossless:
        return f"A lossy rule: {same} of {total} tokens match the target's own output."
    if same == total and config.dtype in EXACT_PRECISIONS:
        return f"Identical: {same} of {total} tokens, {EXACT_PRECISIONS[config.dtype]}."
    if config.dtype not in EXACT_PRECISIONS:
        return (
            f"Identical up to rounding: {same} of {total} tokens match (in {config.dtype} a pass over several "
            "tokens rounds differently from a one-token step, so a near tie can flip)."
        )
    return f"{same} of {total} tokens identical: greedy {config.dtype} should match every token."
