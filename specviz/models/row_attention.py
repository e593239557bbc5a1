"""Attention one query row at a time: what keeps a pass over k + 1 tokens, row for row, the bits of k + 1 steps.

An int8 target is exact to itself only if every row of a verification pass is computed as that token's own step
would compute it. Its matrix products are (:mod:`specviz.models.int8`: int32 sums), but attention is float32, and
transformers calls one attention kernel for a single new token (no mask, key/value heads shared in place) and another
for several (a causal mask, the heads repeated): the two add in different orders, the last bits differ, and the next
layer's int8 rounding of a row turns a last bit into a whole quantisation step. Over a 128-token answer that flips a
near-tie (measured on the Qwen2.5-Coder pair: the int8 target's speculative text left its own on 4 of 4 prompts).

Here every query row, a single step's included, attends through one call: torch's scaled dot-product attention for
one query, softmax(q k^T / sqrt(d)) v, over exactly the keys it may see, gathered in order into a tensor of their
own (a causal row: the cache and the new tokens up to itself; a tree node: the cache and its ancestors), no mask.
A step over one token and each row of a pass over many then run identical arithmetic on identical inputs.
Registered with transformers' attention interface as :data:`ROW_ATTENTION`; its masks are built as for ``sdpa``.
The lean body (:mod:`specviz.models.llama_step`) attends through the same :func:`rows_attended` where its model
does, so a quantised target's lean pass has the bits of transformers' own.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

ROW_ATTENTION = "specviz_rows"


def keys_seen(mask: torch.Tensor | None, row: int, rows: int, keys: int) -> int | torch.Tensor:
    """The keys query ``row`` of ``rows`` attends to: under a (batch 1) 4-D mask, bool (True: seen) or additive (0:
    seen); without one (transformers' causal skip), the cache and the rows up to itself. A count n where they are
    the first n keys (a causal row), else their indices in order (a tree node: the cache and its ancestors)."""
    if mask is None:
        return keys - rows + row + 1
    seen = mask[0, 0, row, -keys:]
    seen = seen if seen.dtype == torch.bool else seen == 0
    count = int(seen.sum())
    return count if bool(seen[:count].all()) else seen.nonzero().flatten()


def rows_attended(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scaling: float | None
) -> torch.Tensor:
    """query (1, heads, T, d), key and value (1, kv heads, S, d), ``mask`` None or (1, 1, T, S) -> (1, T, heads, d).
    Each row is one token's attention, softmax(q k^T * scaling) v, over the keys it sees (:func:`keys_seen`)
    gathered into a contiguous tensor of their own (the cache of a single step is one), the key/value heads shared in
    place, no mask."""
    if query.shape[0] != 1:
        raise ValueError("attention by rows computes one sequence at a time")
    rows = []
    for row in range(query.shape[2]):
        seen = keys_seen(mask, row, query.shape[2], key.shape[2])
        keys, values = (
            (key[:, :, :seen], value[:, :, :seen]) if isinstance(seen, int) else (key[:, :, seen], value[:, :, seen])
        )
        rows.append(
            F.scaled_dot_product_attention(
                query[:, :, row : row + 1], keys.contiguous(), values.contiguous(), scale=scaling, enable_gqa=True
            )
        )
    return torch.cat(rows, dim=2).transpose(1, 2).contiguous()


def attention_by_rows(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    **_: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention signature (inference): :func:`rows_attended`, (1, T, heads, d)."""
    return rows_attended(query, key, value, attention_mask, scaling), None


AttentionInterface.register(ROW_ATTENTION, attention_by_rows)
ALL_MASK_ATTENTION_FUNCTIONS.register(ROW_ATTENTION, sdpa_mask)


def attends_by_rows(model: nn.Module) -> bool:
    """Whether a transformers model's attention runs one query row at a time (a quantised model's does)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == ROW_ATTENTION


def attend_by_rows(model: nn.Module) -> None:
    """Run a transformers model's attention one query row at a time (:func:`attention_by_rows`)."""
    set_implementation = getattr(model, "set_attn_implementation", None)
    if set_implementation is not None:
        set_implementation(ROW_ATTENTION)
