"""Precision and rounding: where a half-precision speculative run departs from the target's own ``generate``.

Greedy speculative decoding emits exactly the target's argmax at every position (Leviathan et al. 2023,
Sec. 3), so in exact arithmetic its output IS the target's greedy output. A computer is not exact: the
target's p at a position comes from the verification pass over k + 1 tokens in speculative decoding, and
from a one-token step in ``generate``. The two run the same weights through matrix products of different
shapes (k + 1 rows against 1), whose kernels sum in a different order, so they round differently. In
float32 the difference is ~1e-5 of a logit and never flips an argmax in practice; in bfloat16 (8 bits of
mantissa) it reaches tenths of a logit, so where the target's top two tokens are nearly tied the two
computations can pick different tokens, and from there the texts part. Serving engines document exactly
this ("lossless up to floating point", vLLM); no rule is at fault, and the same holds for speculative
sampling, whose law is kept up to the same rounding. Pure data in, plain data out; no streamlit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from specviz.analysis.common import decoding_seconds, units_in_budget
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, speculative_decode
from specviz.engine.trace import TopTokens, Trace
from specviz.registry.rules import GREEDY
from specviz.runtime.protocol import first_difference


@dataclass(frozen=True)
class Preference:
    """What one computation of the target's logits made of the two tokens the runs part on: the token it chose,
    the other, and by how much: logit(chosen) - logit(other) (= log p(chosen) - log p(other); None when the other
    token is not among the recorded top tokens)."""

    ids: tuple[int, int]  # (chosen, other)
    texts: tuple[str, str]
    gap: float | None


@dataclass(frozen=True)
class Departure:
    """The first output position where the speculative run and the target's ``generate`` differ, and why."""

    position: int  # 0-based among the new tokens
    round_index: int  # the speculative round whose verification pass computed it (0-based)
    pass_tokens: int  # k + 1: the tokens that pass fed the target
    step: Preference  # ``generate``'s one-token step: its token over the speculative run's
    verification: Preference  # the verification pass over k + 1 tokens: the speculative token over generate's


@dataclass(frozen=True)
class PrecisionRun:
    """One precision: the target alone (``generate``) and speculative decoding on the same prompt, greedy."""

    dtype: str
    generate_ids: list[int]
    speculative_ids: list[int]
    generate_text: str
    speculative_text: str
    departure: Departure | None

    @property
    def matching(self) -> int:
        """New tokens identical before the first departure (all of them when none)."""
        return self.departure.position if self.departure else len(self.generate_ids)


def step_preference(logits: torch.Tensor, chosen: int, other: int, tokenizer: PreTrainedTokenizerBase) -> Preference:
    """How one position's logits (V,), taken in float32, rank ``chosen`` over ``other``."""
    logits = logits.float()
    # transformers types decode as str | list[str]; a flat list of ids decodes to one str
    texts = (tokenizer.decode([chosen]), tokenizer.decode([other]))
    return Preference((chosen, other), texts, float(logits[chosen] - logits[other]))  # type: ignore[arg-type]


def recorded_preference(top: TopTokens, chosen: int, other: int) -> Preference:
    """The same from a trace's recorded top tokens of p (greedy records p at temperature 1, so a log-probability
    difference is the logit difference)."""
    probs = dict(zip(top.ids, top.probs))
    gap = math.log(probs[chosen]) - math.log(probs[other]) if other in probs and probs[other] > 0 else None
    texts = dict(zip(top.ids, top.texts))
    return Preference((chosen, other), (texts.get(chosen, ""), texts.get(other, "")), gap)


def verification_at(trace: Trace, position: int) -> tuple[int, int, TopTokens]:
    """(round index, tokens in its verification pass, the target's recorded top tokens) for the new token at
    ``position``: the round that emitted it, whose one pass fed the last committed token and its drafts."""
    emitted = 0
    for round_ in trace.rounds:
        if position < emitted + len(round_.emitted_ids):
            offset = position - emitted
            accepted = [d for d in round_.draft if d.accepted]
            if offset < len(accepted):
                top = accepted[offset].target_top
            else:
                final = round_.correction or round_.bonus
                assert final is not None, "a round emits a correction or a bonus after its accepted drafts"
                top = final.target_top
            return round_.index, len(round_.draft) + 1, top
        emitted += len(round_.emitted_ids)
    raise IndexError(f"position {position} is past the trace's {emitted} new tokens")


def generate_with_logits(
    pair: ModelPair, prompt_ids: list[int], max_new_tokens: int
) -> tuple[list[int], list[torch.Tensor]]:
    """The target's own greedy ``generate`` (the prompt in one pass, then one-token steps) and each step's logits."""
    ids = torch.tensor([prompt_ids], device=pair.target.device)
    with pair.target.lock, torch.inference_mode():
        # transformers types PreTrainedModel without GenerationMixin, whose generate every causal LM loaded here has
        out = pair.target.model.generate(  # type: ignore[operator]
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            output_logits=True,
            return_dict_in_generate=True,
        )
    return out.sequences[0, len(prompt_ids) :].tolist(), [step[0] for step in out.logits]


def precision_run(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int]) -> PrecisionRun:
    """Greedy decoding of one prompt by the target alone and speculatively, in the pair's precision; where they
    part, the target's top two at that position from both computations."""
    config = config.replace(rule=GREEDY)
    reference, step_logits = generate_with_logits(pair, prompt_ids, config.max_new_tokens)
    trace = speculative_decode(config, prompt_ids=prompt_ids, pair=pair)
    speculative = trace.output_ids
    index = first_difference(reference, speculative)
    departure = None
    if index is not None and index < min(len(reference), len(speculative)):
        round_index, pass_tokens, recorded = verification_at(trace, index)
        ours, theirs = speculative[index], reference[index]
        departure = Departure(
            index,
            round_index,
            pass_tokens,
            step_preference(step_logits[index], theirs, ours, pair.target.tokenizer),
            recorded_preference(recorded, ours, theirs),
        )
    decode = pair.target.tokenizer.decode  # typed str | list[str]; a flat list of ids decodes to one str
    return PrecisionRun(config.dtype, reference, speculative, decode(reference), decode(speculative), departure)  # type: ignore[arg-type]


def match_rate(runs: list[PrecisionRun]) -> dict:
    """Over several prompts in one precision: how many outputs are identical to ``generate``'s, and the share of
    new tokens produced before the first departure."""
    tokens = sum(len(r.generate_ids) for r in runs)
    return dict(
        dtype=runs[0].dtype if runs else "",
        prompts=len(runs),
        identical=sum(r.departure is None for r in runs),
        matching_tokens=sum(r.matching for r in runs),
        tokens=tokens,
        matching_share=sum(r.matching for r in runs) / max(1, tokens),
    )


def presets_fitting(presets: int, config: DecodeConfig, target_step_ms: float) -> int:
    """How many preset prompts the match rate decodes (the target alone and speculatively, each): as many as
    :data:`~specviz.limits.BUTTON_BUDGET_S` holds by the machine profile, at least one."""
    return units_in_budget(decoding_seconds(2, config.max_new_tokens, target_step_ms), 1, presets)
