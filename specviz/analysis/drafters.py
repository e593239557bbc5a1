"""Parallel drafters and EAGLE (the Parallel drafters page). Pure data in, plain data (pandas) out; no
streamlit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from specviz.analysis.common import _tick, decoding_seconds, stats_of, units_in_budget
from specviz.analysis.metrics import pooled_acceptance_by_position
from specviz.config import DecodeConfig
from specviz.drafters.modules import drafter_settings
from specviz.drafters.parallel import drafter_inputs
from specviz.engine import ModelPair, autoregressive_decode, speculative_decode
from specviz.engine.trace import NOT_VERIFIED, Trace
from specviz.limits import SWEEP_TOKENS_MAX, Progress
from specviz.models.profile import model_profile
from specviz.registry.drafters import DRAFTERS

COMPARE_PROMPTS_MAX = 2  # every drafter and the target alone decode each
COMPARE_TOKENS_MIN = 8
# target steps a new token costs at most under a drafter that pays little (blockwise heads accept about one token a
# round: one pass over γ + 1 tokens and the drafter's own, for little more than one token)
WEAK_DRAFTER_STEPS = 1.5


def compared_seconds(kinds: int, prompts: int, tokens: int, target_step_ms: float) -> float:
    """What :func:`compare_drafters` costs at most, predicted from the machine profile: on each prompt the target alone
    and each drafter, ``tokens`` new tokens each at :data:`WEAK_DRAFTER_STEPS` target steps a token."""
    return WEAK_DRAFTER_STEPS * decoding_seconds(
        min(prompts, COMPARE_PROMPTS_MAX) * (1 + kinds), tokens, target_step_ms
    )


def compared_tokens(config: DecodeConfig, kinds: int, prompts: int, target_step_ms: float) -> int:
    """New tokens per decode in the comparison: the config's, at most :data:`~specviz.limits.SWEEP_TOKENS_MAX` and
    as many as :data:`~specviz.limits.BUTTON_BUDGET_S` holds by :func:`compared_seconds` on this machine (at least
    :data:`COMPARE_TOKENS_MIN`)."""
    unit = compared_seconds(kinds, prompts, 1, target_step_ms)
    return units_in_budget(unit, COMPARE_TOKENS_MIN, min(config.max_new_tokens, SWEEP_TOKENS_MAX))


def drafter_attention(config: DecodeConfig, pair: ModelPair, prompt_ids: list[int], kind: str) -> np.ndarray:
    """The attention pattern a parallel drafter uses at the end of the prompt: (k, window + 1 + k),
    one row per drafted slot, over [target states ..., pending token, slots ...]."""
    drafter, memory = drafter_inputs(drafter_settings(config.replace(drafter=kind))[1], pair, prompt_ids)
    with pair.target.lock, torch.inference_mode():
        pending = pair.target.model.get_input_embeddings()(torch.tensor([prompt_ids[-1]], device=pair.target.device))
        return drafter.module.attention(memory[None], pending.float())[0].cpu().numpy()


CONFIDENCE_BINS = 10


def confidence_calibration(traces: list[Trace], bins: int = CONFIDENCE_BINS) -> pd.DataFrame:
    """EAGLE-2's observation (Li et al. 2024, arXiv 2406.16858, Sec. 3.2): the draft's confidence q(x) in a token it
    drafted against how often the target accepted it, over every verified drafted token, in ``bins`` equal-width
    bins of confidence: (bin, confidence = mean q in the bin, acceptance_rate, verified). A draft whose points lie
    near the diagonal is calibrated: its confidence tells where to grow a tree."""
    checked = [(pos.q, pos.accepted) for t in traces for r in t.rounds for pos in r.draft if pos.status != NOT_VERIFIED]
    if not checked:
        return pd.DataFrame(columns=["bin", "confidence", "acceptance_rate", "verified"])
    frame = pd.DataFrame(checked, columns=["q", "accepted"])
    frame["bin"] = np.minimum((frame.q * bins).astype(int), bins - 1)
    grouped = frame.groupby("bin").agg(
        confidence=("q", "mean"), acceptance_rate=("accepted", "mean"), verified=("accepted", "size")
    )
    return grouped.reset_index()


def compare_drafters(
    config: DecodeConfig,
    pair: ModelPair,
    prompts_ids: list[list[int]],
    kinds: list[str],
    on_progress: Progress | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Each drafter on the same prompts: (summary per drafter, acceptance per drafted position, confidence
    calibration per drafter).

    Summary: mean tokens per round, acceptance, draft milliseconds and draft passes per round, and
    end-to-end tokens/s against the target alone (autoregressive, same process)."""
    step_ms = model_profile(pair.target).step_ms
    config = config.replace(max_new_tokens=compared_tokens(config, len(kinds), len(prompts_ids), step_ms))
    prompts_ids = prompts_ids[:COMPARE_PROMPTS_MAX]
    total, done = len(prompts_ids) * (len(kinds) + 1), 0
    ar_tokens, ar_seconds = 0, 0.0
    for ids in prompts_ids:
        out, seconds = autoregressive_decode(config, pair, ids)
        ar_tokens, ar_seconds = ar_tokens + len(out), ar_seconds + seconds
        done += 1
        _tick(on_progress, done, total)
    summary, positions, calibration = [], [], []
    for kind in kinds:
        traces = []
        for ids in prompts_ids:
            traces.append(speculative_decode(config.replace(drafter=kind), prompt_ids=ids, pair=pair))
            done += 1
            _tick(on_progress, done, total)
        rounds = [r for t in traces for r in t.rounds]
        drafting = [r for r in rounds if r.draft]
        stats = [stats_of(t) for t in traces]
        tokens = sum(s.new_tokens for s in stats)
        seconds = sum(s.wall_ms for s in stats) / 1e3
        summary.append(
            dict(
                drafter=DRAFTERS[kind].label,
                tokens_per_round=tokens / len(rounds),
                acceptance_rate=(sum(s.accepted_tokens for s in stats) / max(1, sum(s.drafted_tokens for s in stats))),
                draft_ms_per_round=sum(r.draft_ms for r in drafting) / max(1, len(drafting)),
                draft_passes_per_round=sum(r.draft_forward_passes for r in drafting) / max(1, len(drafting)),
                tokens_per_s=tokens / seconds,
                speedup_vs_autoregressive=(tokens / seconds) / (ar_tokens / ar_seconds),
            )
        )
        calibration.append(confidence_calibration(traces).assign(drafter=DRAFTERS[kind].label))
        for row in pooled_acceptance_by_position(traces).itertuples():
            positions.append(
                dict(
                    drafter=DRAFTERS[kind].label,
                    position=int(row.position),
                    verified=int(row.verified),
                    accepted=int(row.accepted),
                    acceptance_rate=row.acceptance_rate,
                )
            )
    return pd.DataFrame(summary), pd.DataFrame(positions), pd.concat(calibration, ignore_index=True)
