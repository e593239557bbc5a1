"""A draft's token ranking for FR-Spec's trimmed head, kept beside the draft's weights.

FR-Spec (Zhao et al. 2025, arXiv 2502.14856): the draft scores only the K most frequent tokens of the
target's text, so q is exactly 0 elsewhere and every rule stays exact (a token the draft cannot propose
only lowers acceptance), while the draft's output head, most of a small draft's cost on a CPU, shrinks
from V rows to K. The ranking sits in ``vocab_order.safetensors`` beside a draft's checkpoint, with the
head size K the draft uses by default in its metadata. A trimmed head's K scores go back over the whole vocabulary
through :func:`to_full_vocab` (the draft model's and EAGLE's heads alike).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

VOCAB_ORDER_FILE = "vocab_order.safetensors"


@dataclass(frozen=True)
class VocabRanking:
    """A draft's token ids, most frequent in the target's text first, and the head size K it was shipped
    to use (FR-Spec: the draft scores only ``order[:K]``; q is zero elsewhere)."""

    order: torch.Tensor  # (V,) int64
    recommended: int  # 0: the full vocabulary


def read_vocab_ranking(model_dir: Path) -> VocabRanking | None:
    """The ranking saved beside a draft directory, or None for a draft without one."""
    path = model_dir / VOCAB_ORDER_FILE
    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as f:
        return VocabRanking(f.get_tensor("vocab_order").long(), int(f.metadata().get("draft_vocab", 0)))


def write_vocab_ranking(model_dir: Path, order: torch.Tensor, draft_vocab: int) -> None:
    save_file(
        {"vocab_order": order.to(torch.int32).contiguous()},
        str(model_dir / VOCAB_ORDER_FILE),
        metadata={"draft_vocab": str(draft_vocab)},
    )


def to_full_vocab(short: torch.Tensor, ids: torch.Tensor, vocab: int, off_head: float = -math.inf) -> torch.Tensor:
    """Scores (..., V) from a trimmed head's scores (..., K) of the token ``ids`` (K,), ``off_head`` at every other
    token: with -inf logits q is exactly 0 off the head, so a token is drawn from exactly the q every rule sees."""
    full = torch.full((*short.shape[:-1], vocab), off_head, dtype=short.dtype, device=short.device)
    full[..., ids] = short
    return full
