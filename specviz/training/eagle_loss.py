"""Step 3 of ``train-eagle`` (:mod:`specviz.training.eagle`), a batch's loss, with the settings of a run: the
feature regression SmoothL1(f^_{i+1}, f_{i+1}) plus ``kl_weight`` x the forward KL from the target's top-k p to the
head's q over its K-token head (EAGLE, Li et al. 2024, arXiv 2401.15077, Sec. 3.2), averaged over ``unroll`` drafting
steps in which the head reads its own predicted features (EAGLE-3's training-time test, Li et al. 2025, arXiv
2503.01840).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from specviz.drafters.eagle_head import EagleHead, eagle_step
from specviz.models.loading import LoadedModel
from specviz.runtime.llama_step import llama_weights
from specviz.runtime.vocab_ranking import to_full_vocab
from specviz.training.distillation import divergence_loss
from specviz.training.eagle_text import Sequence, TextSettings

OFF_HEAD_LOGP = -30.0  # log q of a token outside the head in the loss (q is 0 there; a constant, no gradient)


@dataclass(frozen=True)
class EagleSettings:
    """The shipped head's settings (short runs on the same text chose them: two answers a step and a KL weight of 1
    beat eight answers a step and EAGLE's 0.1 at equal compute; unrolling two steps lifted drafted position 2)."""

    text: TextSettings = field(default_factory=TextSettings)
    steps: int = 7000
    rows_per_step: int = 2  # sequences per optimiser step
    lr: float = 1e-3
    warmup: int = 50
    kl_weight: float = 1.0  # EAGLE's w_cls (0.1 in the paper)
    kl_positions: int = 256  # answer positions per step that pay for the head's K-row output (the costly part)
    noise: float = 0.1  # U(-noise, noise) added to the input features (EAGLE)
    unroll: int = 2  # drafting steps unrolled in training (1: teacher-forced features only, as EAGLE-1)
    draft_vocab: int = 8192
    seed: int = 0


def padded(rows: list[torch.Tensor], value: float = 0) -> torch.Tensor:
    """Right-pad tensors (L_i, ...) to (B, L, ...)."""
    out = rows[0].new_full((len(rows), max(len(r) for r in rows), *rows[0].shape[1:]), value)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def unrolled_mask(length: int, step: int) -> torch.Tensor:
    """Attention of unrolled step m over the rows of steps 1..m (length x m * length, bool): row j sees the exact rows
    0 .. j - m + 1 of step 1 and, in step k's block (2 <= k <= m), its own earlier draft row j - m + k: exactly what
    the head's cache holds when it drafts its m-th token of a round at position j."""
    rows, cols = torch.arange(length)[:, None], torch.arange(length)[None, :]
    return torch.cat([cols <= rows - step + 1] + [cols == rows - step + k for k in range(2, step + 1)], dim=1)


def step_loss(
    eagle: EagleHead,
    target: LoadedModel,
    sequences: list[Sequence],
    features: list[torch.Tensor],
    head: tuple[torch.Tensor, torch.Tensor],
    settings: EagleSettings,
    generator: torch.Generator,
) -> tuple[torch.Tensor, dict]:
    """The training loss of a batch of sequences (step 3 of the module docstring) and its two parts; ``head``: the
    K token ids of the head (K,) and the target's output rows for them (K, H).

    Unrolled over ``settings.unroll`` steps (EAGLE-3's training-time test, Li et al. 2025, arXiv 2503.01840): step 1
    reads the exact features; step m reads at row j the feature step m - 1 predicted at row j - 1, as the m-th
    drafted token of a round does, so the head also learns to draft on its own features."""
    head_ids, head_rows = head
    weights = llama_weights(target.model)
    assert weights is not None, "EAGLE trains on a plain Llama target (the embedded SmolLM2)"
    f = padded([x.float() for x in features])  # (B, L, H) exact features
    ids = padded([s.ids for s in sequences])  # (B, L)
    valid = padded([torch.ones(len(s.ids) - 1, dtype=torch.bool) for s in sequences], False)  # rows i with x_{i+1}
    inputs = f[:, :-1] + (torch.rand(f[:, :-1].shape, generator=generator) * 2 - 1) * settings.noise
    length = inputs.shape[1]
    # answer positions: f^_{i+1} scores x_{i+2}, where the target's top-k at position i+1 is stored
    answers = [
        (b, s.prompt_len - 2 + j)
        for b, s in enumerate(sequences)
        for j in range(len(s.top_ids))
        if 0 <= s.prompt_len - 2 + j < len(s.ids) - 1
    ]
    sampler = random.Random(int(torch.randint(0, 2**31, (1,), generator=generator)))
    cache, regression, kl = DynamicCache(), torch.zeros(()), torch.zeros(())
    for step in range(1, settings.unroll + 1):
        predicted = eagle_step(
            eagle, weights, inputs, ids[:, 1:], torch.arange(length), unrolled_mask(length, step), cache
        )  # (B, L - 1, H): f^_{i+1} at row i
        rows = valid.clone()
        rows[:, : step - 1] = False  # the m-th drafted token needs m - 1 rows before it
        regression = regression + F.smooth_l1_loss(predicted[rows], f[:, 1:][rows])
        eligible = [(b, i) for b, i in answers if i >= step - 1]
        chosen = sampler.sample(eligible, min(settings.kl_positions, len(eligible)))
        at = torch.tensor(chosen)
        short = torch.log_softmax(predicted[at[:, 0], at[:, 1]] @ head_rows.T, dim=-1)  # (N, K)
        logp = to_full_vocab(short, head_ids, weights.embedding.num_embeddings, OFF_HEAD_LOGP)  # (N, V)
        top_ids = torch.stack([sequences[b].top_ids[i - sequences[b].prompt_len + 2] for b, i in chosen])
        top_logp = torch.stack([sequences[b].top_logp[i - sequences[b].prompt_len + 2] for b, i in chosen])
        kl = kl + divergence_loss(logp, top_ids, top_logp, "fkl")
        inputs = torch.cat([predicted[:, :1] * 0, predicted[:, :-1]], dim=1)  # row j reads f^_j from row j - 1
    regression, kl = regression / settings.unroll, kl / settings.unroll
    return regression + settings.kl_weight * kl, {"regression": regression.item(), "kl": kl.item()}
