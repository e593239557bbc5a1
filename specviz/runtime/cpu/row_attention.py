"""Attention one query row at a time: what keeps a pass over k + 1 tokens, row for row, the bits of k + 1 steps.

An int8 target is batch-invariant only if every row of a verification pass is computed as that token's own step
would compute it. Its matrix products are (:mod:`specviz.runtime.cpu.int8`: int32 sums), but attention is float32, and
transformers calls one attention kernel for a single new token (no mask, key/value heads shared in place) and another
for several (a causal mask, the heads repeated): the two add in different orders, the last bits differ, and the next
layer's int8 rounding of a row turns a last bit into a whole quantisation step. Over a 128-token answer that flips a
near-tie (measured on the Qwen2.5-Coder pair: the int8 target's speculative text left its own on 4 of 4 prompts).

Here every query row, a single step's included, attends as if alone: softmax(q k^T / sqrt(d)) v over exactly the
keys it may see (a causal row: the cache and the new tokens up to itself; a tree node: the cache and its
ancestors), no mask. On a CPU the package's C kernel (``row_attention.c``) computes every row of a pass in one call,
each row's sums in a fixed order of its own; elsewhere, or where the kernel is not built, torch's scaled dot-product
attention runs once per row over those keys gathered into a tensor of their own. Either way a step over one token
and each row of a pass over many run identical arithmetic on identical inputs (one way per process: the kernel is
built or not).
Registered with transformers' attention interface as :data:`ROW_ATTENTION`; its masks are built as for ``sdpa``.
The direct Llama body (:mod:`specviz.runtime.llama_step`) attends through the same :func:`rows_attended` where its model
does, so a quantised target's lean pass has the bits of transformers' own.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from specviz.runtime.cpu.compiled import Kernels, RowsAttentionArgs, address, compiled_kernels

ROW_ATTENTION = "specviz_rows"


def keys_seen(mask: torch.Tensor | None, rows: int, keys: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The keys each of ``rows`` query rows attends to: under a (batch 1) 4-D mask, bool (True: seen) or additive (0:
    seen); without one (transformers' causal skip), the cache and the rows up to itself. Returns (counts (rows,)
    int32, None) where every row sees the first keys (causal rows), else (counts, indices (rows, keys) int32: row r's
    first counts[r] entries are the keys it sees, in order; a tree node's are the cache and its ancestors)."""
    if mask is None:
        return torch.arange(keys - rows + 1, keys + 1, dtype=torch.int32), None
    seen = mask[0, 0, :, -keys:]
    seen = seen if seen.dtype == torch.bool else seen == 0
    counts = seen.sum(dim=1, dtype=torch.int32)
    if bool((seen == (torch.arange(keys, device=seen.device) < counts[:, None])).all()):
        return counts.cpu(), None
    seen_first = torch.sort((~seen).to(torch.uint8), dim=1, stable=True).indices  # the seen keys first, in order
    return counts.cpu(), seen_first.to(torch.int32).cpu()


def rows_attended(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None, scaling: float | None
) -> torch.Tensor:
    """query (1, heads, T, d), key and value (1, kv heads, S, d), ``mask`` None or (1, 1, T, S) -> (1, T, heads, d).
    Each row is one token's attention, softmax(q k^T * scaling) v, over the keys it sees (:func:`keys_seen`),
    computed as that row alone would be: by the package's kernel (:func:`kernel_rows_attended`) where it runs, else
    by one torch call per row over those keys gathered into a contiguous tensor of their own (the cache of a single
    step is one), the key/value heads shared in place."""
    if query.shape[0] != 1:
        raise ValueError("attention by rows computes one sequence at a time")
    rows, keys, head_dim = query.shape[2], key.shape[2], query.shape[3]
    counts, indices = keys_seen(mask, rows, keys)
    scale = scaling if scaling is not None else head_dim**-0.5
    kernels = attention_kernels(query)
    if kernels is not None:
        return kernel_rows_attended(kernels, query, key, value, counts, indices, scale)
    attended = []
    for row, count in enumerate(counts.tolist()):
        seen = slice(0, count) if indices is None else indices[row, :count].to(key.device, torch.long)
        attended.append(
            F.scaled_dot_product_attention(
                query[:, :, row : row + 1],
                key[:, :, seen].contiguous(),
                value[:, :, seen].contiguous(),
                scale=scale,
                enable_gqa=True,
            )
        )
    return torch.cat(attended, dim=2).transpose(1, 2).contiguous()


def attention_kernels(query: torch.Tensor) -> Kernels | None:
    """The package's kernels where they attend these rows: float32 on a CPU, head dimensions a multiple of 16, the
    library built on this machine (one way for the whole process: it is built or not)."""
    if query.device.type != "cpu" or query.dtype != torch.float32 or query.shape[-1] % 16:
        return None
    kernels = compiled_kernels()
    return kernels if isinstance(kernels, Kernels) else None


def kernel_rows_attended(
    kernels: Kernels,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    counts: torch.Tensor,
    indices: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """:func:`rows_attended` through ``row_attention.c``: every row of the pass in one call (float32 CPU tensors)."""
    rows, heads, head_dim = query.shape[2], query.shape[1], query.shape[3]
    q, k, v = (t[0].contiguous() for t in (query, key, value))
    kv_heads, keys = k.shape[0], k.shape[1]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads do not share {kv_heads} key/value heads evenly")
    seen_count, seen_index = seen_addresses(counts, indices, rows, keys)
    check_keys_seen(counts, indices, keys)
    out = torch.empty(1, rows, heads, head_dim)
    failed = kernels.attention(
        RowsAttentionArgs(
            q=address("q", q, (heads, rows, head_dim)),
            rows=rows,
            heads=heads,
            d=head_dim,
            k=address("k", k, (kv_heads, keys, head_dim)),
            v=address("v", v, (kv_heads, keys, head_dim)),
            kv_heads=kv_heads,
            keys=keys,
            seen_count=seen_count,
            seen_index=seen_index,
            scale=scale,
            out=out.data_ptr(),
        )
    )
    if failed:
        raise MemoryError("the attention kernel could not allocate its scores")
    return out


def check_keys_seen(counts: torch.Tensor, indices: torch.Tensor | None, keys: int) -> None:
    """Raise ValueError unless every row of :func:`keys_seen`'s ``counts`` (rows,) sees 1 to ``keys`` keys and every
    index of ``indices`` (rows, keys) is among them: a kernel reads a row's keys where these say, so a count or an
    index out of range would read past the keys. Checked once per set of counts (an int4 pass's layers share one)."""
    if counts.numel() and not 1 <= int(counts.min()) <= int(counts.max()) <= keys:
        raise ValueError(f"a row sees 1 to {keys} keys, not {counts.tolist()}")
    if indices is not None and indices.numel() and not 0 <= int(indices.min()) <= int(indices.max()) < keys:
        raise ValueError(f"the keys a row sees are among the {keys}, not {indices.tolist()}")


def seen_addresses(counts: torch.Tensor, indices: torch.Tensor | None, rows: int, keys: int) -> tuple[int, int | None]:
    """The kernels' ``seen_count`` and ``seen_index`` for counts (rows,) int32 and indices (rows, keys) int32 or None
    (their shapes and types checked: :func:`~specviz.runtime.cpu.compiled.address`; their values, once, by
    :func:`check_keys_seen`)."""
    seen_count = address("seen_count", counts, (rows,), torch.int32)
    return seen_count, None if indices is None else address("seen_index", indices, (rows, keys), torch.int32)


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
