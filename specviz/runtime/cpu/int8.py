"""The int8 precision: int8 weight matrices, each activation row quantised to 8 bits on the fly, products in int32.

    y_r = s_r * (q(x_r) . Q_j) * w_j + b_j,    q(x_r) = round(x_r / s_r),  s_r = max_i |x_ri| / 127,
                                                Q_j = round(W_j / w_j),    w_j = max_i |W_ji| / 127

Weights are quantised per output row (vector-wise, Dettmers et al. 2022, LLM.int8 without the outliers) and every
activation row by its own scale (per-token, Yao et al. 2022, ZeroQuant; Xiao et al. 2023, SmoothQuant). The dot
products of int8 by int8 are summed in int32, which is exact: no rounding, so no summation order can change them,
and the rescale to float32 is element by element. With attention computed one query row at a time
(:mod:`specviz.runtime.cpu.row_attention`), every row of a pass is computed exactly as it would be alone: a verification
pass over k + 1 rows gives, row for row, the bits of k + 1 one-row steps (tested). That is what lets the int8
TARGET be batch-invariant: greedy speculative output token-identical to the int8 target's own
autoregressive output. (torch's dynamic quantisation shares one activation scale among all rows of a pass, so a
row's result depends on its neighbours: it cannot serve a target.) The product runs through oneDNN on weights
packed once (VNNI or AMX dot products where the CPU has them; ``torch._int_mm`` where torch has no oneDNN), so a
pass over a few rows streams the weights once, at about the cost of one row: a step reads a quarter of float32's
bytes and the pass stays flat.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from specviz.cache import cache_root
from specviz.runtime.cpu.mapped_pages import file_backed, release_file_pages, replace_linear_layers
from specviz.runtime.cpu.row_attention import attend_by_rows
from specviz.runtime.machine import cpu_flags, give_back_freed_heap

INT8_MAX = 127  # symmetric: [-127, 127], so negation never overflows
ROWS_AT_ONCE = 2048  # rows of a weight quantised together as it is read: quantise_rows_as_read
UNSIGNED_ZERO = 128  # oneDNN takes activations as unsigned bytes: q + 128, its zero point 128
DOT_PRODUCT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")  # one-instruction int8 dot products into int32


def int8_not_on(device: torch.device) -> str | None:
    """Why :class:`Int8Linear` cannot run on ``device``, or None: it needs a CPU (``torch._int_mm`` on CUDA needs
    more than 16 rows)."""
    return None if device.type == "cpu" else f"int8 weights run on a CPU; on {device} pick bfloat16"


def packs_int8() -> bool:
    """Whether oneDNN's int8 product on packed weights is here (torch's CPU build with oneDNN)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.onednn, "qlinear_prepack")


def weight_levels(flags: frozenset[str]) -> int:
    """The largest |Q| of a weight: 127 where the CPU has int8 dot-product instructions; 63 without them, where the
    x86 kernels add two u8 x s8 products in 16 bits (``vpmaddubsw``), which 255 * 127 * 2 overflows and
    255 * 63 * 2 = 32130 does not: 7-bit weights keep every sum exact (oneDNN's int8 notes; fbgemm's
    ``reduce_range`` for the same reason)."""
    return INT8_MAX if any(flag in flags for flag in DOT_PRODUCT_FLAGS) else 63


@dataclass(frozen=True)
class Int8Matrix:
    """W (out, in) ~ scales[:, None] * Q, with a float32 ``bias`` (out,) added after the product. ``weights`` holds
    Q once: packed by oneDNN (opaque, (in, out)) where :func:`packs_int8`, else plain (out, in) int8."""

    weights: torch.Tensor
    scales: torch.Tensor  # (out,) float32
    zero_points: torch.Tensor  # (out,) zeros: oneDNN's weight zero points (symmetric)
    bias: torch.Tensor | None = None

    @classmethod
    def quantise(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Int8Matrix:
        """Symmetric per-row quantisation of a float matrix: w_j = max_i |W_ji| / L, Q_j = round(W_j / w_j) with L
        from :func:`weight_levels`."""
        return cls.of_values(*quantise_rows_as_read(weight.detach(), weight_levels(cpu_flags())), bias)

    @classmethod
    def of_values(cls, values: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None) -> Int8Matrix:
        """The matrix of int8 ``values`` (out, in) and their row ``scales`` (out, 1), packed where oneDNN is."""
        weights = torch.ops.onednn.qlinear_prepack(values, [1, values.shape[1]]) if packs_int8() else values
        zeros = torch.zeros(values.shape[0], dtype=torch.long)
        return cls(weights, scales.reshape(-1).contiguous(), zeros, None if bias is None else bias.detach().float())

    @property
    def values(self) -> torch.Tensor:
        """Q (out, in) int8 (unpacked: a new tensor where the weights are packed)."""
        return self.weights.to_dense().t().contiguous() if self.weights.is_mkldnn else self.weights

    @property
    def shape(self) -> tuple[int, int]:
        out, inp = self.scales.shape[0], self.weights.shape[0 if self.weights.is_mkldnn else 1]
        return out, inp

    def rows(self, ids: torch.Tensor) -> Int8Matrix:
        """The output rows ``ids`` only (each keeps its own scale: no re-quantisation)."""
        bias = None if self.bias is None else self.bias[ids]
        return Int8Matrix.of_values(self.values[ids].contiguous(), self.scales[ids], bias)

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] + 4 * self.shape[0]


def quantise_rows(x: torch.Tensor, levels: int = INT8_MAX) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row of ``x`` (M, in) by its own scale: (int8 values in [-levels, levels] (M, in), scales (M, 1))."""
    scales = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / levels
    return torch.round(x / scales).clamp(-levels, levels).to(torch.int8), scales


def quantise_rows_as_read(x: torch.Tensor, levels: int = INT8_MAX) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`quantise_rows` of a weight (M, in) as it is read from its file, :data:`ROWS_AT_ONCE` rows at a time,
    each block's file pages given back once quantised (:func:`~specviz.runtime.cpu.mapped_pages.release_file_pages`;
    a weight still read elsewhere, a tied embedding, faults them in again). The same values and scales bit for bit,
    for every row is quantised by its own scale alone, but a load holds one block of the float32 weight and of its
    temporaries instead of all of them: quantising a 151,936-row output head or embedding at once held its file pages
    and two float32 copies besides (issue "House v5": the Qwen pair's race peaked at 6.0 GB for 2.58 GB kept)."""
    values, scales = torch.empty(x.shape, dtype=torch.int8), torch.empty(x.shape[0], 1)
    for start in range(0, x.shape[0], ROWS_AT_ONCE):
        block = x[start : start + ROWS_AT_ONCE]
        values[start : start + ROWS_AT_ONCE], scales[start : start + ROWS_AT_ONCE] = quantise_rows(
            block.float(), levels
        )
        release_file_pages(block)
    return values, scales


def int8_products(rows: torch.Tensor, matrix: Int8Matrix) -> torch.Tensor:
    """float32 (M, out): the exact int32 sums q(x_r) . Q_j, each times w_j (one rounding per element)."""
    if not matrix.weights.is_mkldnn:
        return torch._int_mm(rows, matrix.weights.t()).float() * matrix.scales
    unsigned = (rows.to(torch.int16) + UNSIGNED_ZERO).to(torch.uint8)
    return torch.ops.onednn.qlinear_pointwise(
        unsigned, 1.0, UNSIGNED_ZERO, matrix.weights, matrix.scales, matrix.zero_points,
        None, 1.0, 0, torch.float32, "none", [], "",
    )  # fmt: skip


def int8_linear(x: torch.Tensor, matrix: Int8Matrix) -> torch.Tensor:
    """x (..., in) @ W^T + b on an :class:`Int8Matrix`, in float32 (..., out): each row of x quantised by its own
    scale, the int8 products summed exactly in int32, then rescaled element by element."""
    rows, scales = quantise_rows(x.reshape(-1, x.shape[-1]).float())
    y = int8_products(rows, matrix) * scales
    if matrix.bias is not None:
        y = y + matrix.bias
    return y.view(*x.shape[:-1], matrix.shape[0])


class Int8Linear(nn.Module):
    """A Linear layer on an :class:`Int8Matrix` (one int8 copy, no float one) through :func:`int8_linear`. Its
    ``weight`` has the matrix's shape only (a tensor on the "meta" device: reading its values fails loudly)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.matrix = Int8Matrix.quantise(linear.weight, linear.bias)
        self.weight = torch.empty(self.out_features, self.in_features, device="meta")  # the shape; values in matrix

    @property
    def matrix_bytes(self) -> int:
        """Bytes of the weight held outside the model's parameters: a byte per weight, a float per row's scale."""
        return self.matrix.nbytes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int8_linear(x, self.matrix).to(x.dtype)


class Int8Embedding(nn.Module):
    """An input embedding on int8 rows, each with its own scale: e(t) = w_t * Q_t, looked up and rescaled in float32
    (a quarter of float32's bytes; a lookup is no product, so every row takes all 127 levels). The int8 rows live in
    a file of the cache, mapped (:func:`~specviz.runtime.cpu.mapped_pages.file_backed`): a text's lookups make only its
    tokens' rows resident. Like :class:`Int8Linear`, its ``weight`` has the table's shape only (on the "meta"
    device)."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = embedding.num_embeddings, embedding.embedding_dim
        values, scales = quantise_rows_as_read(embedding.weight.detach())
        self.values = file_backed(values, cache_root() / "tables")
        self.scales = scales.reshape(-1)
        self.weight = torch.empty(self.num_embeddings, self.embedding_dim, device="meta")

    @property
    def matrix_bytes(self) -> int:
        """Bytes of the table held outside the model's parameters: a byte per value, a float per row's scale."""
        return self.values.numel() + 4 * self.scales.numel()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.values[ids].float() * self.scales[ids].unsqueeze(-1)


def quantise_input_embedding(model: nn.Module) -> None:
    """Put a freshly loaded float32 model's input embedding on int8 rows (:class:`Int8Embedding`), in place, once its
    Linear layers (a tied output head among them) were quantised from the float32 table; the table's file pages are
    given back. A model without ``get_input_embeddings`` keeps its own."""
    get, put = getattr(model, "get_input_embeddings", None), getattr(model, "set_input_embeddings", None)
    embedding = get() if get is not None else None
    if put is not None and isinstance(embedding, nn.Embedding):
        put(Int8Embedding(embedding))
        release_file_pages(embedding.weight)


def quantize_int8(model: nn.Module) -> int:
    """Put every Linear layer of a freshly loaded float32 ``model`` on int8 and then its input embedding (in place,
    before the model is shared); the norms stay float32, and its attention runs one query row at a time
    (:mod:`specviz.runtime.cpu.row_attention`: what keeps a pass's rows the bits of single steps beyond the products).
    The quantisation's float32 temporaries go back to the system before the next model loads. Returns how many Linear
    layers changed."""
    changed = replace_linear_layers(model, lambda layer, _shared: Int8Linear(layer))
    quantise_input_embedding(model)
    attend_by_rows(model)
    give_back_freed_heap()
    return changed
