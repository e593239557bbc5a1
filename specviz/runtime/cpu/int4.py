"""The int4 precision: 4-bit weights in groups of 32 inputs, each group with its own scale and minimum (the layout of
GPTQ, AWQ and llama.cpp's Q4_K sub-blocks: Frantar et al. 2023; Lin et al. 2024), times each activation row
quantised to 8 bits by its own scale, the products summed exactly in int32:

    W_ji ~ s_jg * Q_ji + m_jg,   Q_ji in 0..15,   s_jg = (max_g W_j - min_g W_j) / 15,   m_jg = min_g W_j
    y_rj = t_r * sum_g (s_jg * sum_{i in g} Q_ji a_ri + m_jg * sum_{i in g} a_ri) + b_j,   a_r = round(x_r / t_r)

for the group g of 32 inputs that holds i (s and m stored in float16, Q rounded against the stored pair). The
product is the package's C kernel (``int4_rows.c``, compiled for this CPU by :mod:`specviz.runtime.cpu.compiled`): each
row's integer sums are exact and its float steps the same fused multiply-adds in the same order however many rows
share a pass, so a pass over k + 1 rows gives, row for row, the bits of k + 1 one-row steps (tested), on every
instruction set it is compiled for (AVX-512 VNNI, AVX2, plain C: tested equal bit for bit). With attention one
query row at a time (:mod:`specviz.runtime.cpu.row_attention`), that makes an int4 TARGET batch-invariant, as int8's
is. A step reads about 0.63 bytes a weight (an eighth of float32's, scales included), unpacked once per pass and
shared by its rows, so the pass stays near the cost of one row until the integer dot products (64 a
VNNI instruction) catch up with the memory. A model fetched from a GGUF takes the file's own Q4_K blocks as its
groups where it has them (:mod:`specviz.runtime.cpu.q4k`: the same layout, so no second 4-bit rounding). The output
head and the input embedding stay int8 (:mod:`specviz.runtime.cpu.int8`): a draft's head is trimmed by FR-Spec, a
target's decides every token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn
from transformers import PreTrainedModel

from specviz.runtime.cpu.compiled import Kernels, address, compiled_kernels
from specviz.runtime.cpu.int8 import Int8Linear, quantise_input_embedding
from specviz.runtime.cpu.mapped_pages import replace_linear_layers
from specviz.runtime.cpu.q4k import Q4K_FILE, q4k_groups
from specviz.runtime.cpu.row_attention import attend_by_rows
from specviz.runtime.machine import give_back_freed_heap

GROUP = 32  # inputs per scale and minimum
TILE = 16  # outputs per tile of the packed layout (one AVX-512 vector of int32 sums)
LEVELS = 15  # 4 bits: 0..15
BLOCK_BYTES = TILE * 2 * 2 + TILE * GROUP // 2  # a tile's group: 16 float16 scales and minimums, 256 bytes of nibbles


def int4_not_on(device: torch.device) -> str | None:
    """Why :class:`Int4Linear` cannot run on ``device``, or None: it needs a CPU where the C kernel compiles."""
    if device.type != "cpu":
        return f"int4 weights run on a CPU; on {device} pick bfloat16"
    kernel = compiled_kernels()
    return None if isinstance(kernel, Kernels) else f"int4 weights need the package's C kernel, not built: {kernel}"


def packs_int4(linear: nn.Linear) -> bool:
    """Whether a layer's shape suits the kernel: whole groups of inputs, whole tiles of outputs."""
    return linear.in_features % GROUP == 0 and linear.out_features % TILE == 0


Groups = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # (Q, s, m) of a weight: :func:`quantise_groups`


def quantise_groups(weight: torch.Tensor) -> Groups:
    """W (out, in) as (Q (out, in / 32, 32) uint8 in 0..15, s (out, in / 32) float16, m (out, in / 32) float16), Q
    rounded against the float16 s and m the kernel reads."""
    w = weight.detach().float().reshape(weight.shape[0], -1, GROUP)
    low, high = w.amin(dim=-1), w.amax(dim=-1)
    scales, minimums = ((high - low) / LEVELS).half(), low.half()
    steps = scales.float().clamp(min=torch.finfo(torch.float16).tiny)[..., None]
    values = torch.round((w - minimums.float()[..., None]) / steps).clamp(0, LEVELS).to(torch.uint8)
    return values, scales, minimums


def pack_groups(values: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor) -> torch.Tensor:
    """The kernel's layout (``int4_rows.c``): per tile of 16 outputs, per group, 16 float16 scales, 16 float16
    minimums and 4 chunks of 64 bytes, byte 4o + k of chunk c holding inputs 8c + k (low nibble) and 8c + 4 + k
    (high nibble) of output o. Returns (tiles, groups, 320) uint8."""
    outputs, groups = scales.shape
    tiles = outputs // TILE
    q = values.reshape(tiles, TILE, groups, 4, 2, 4)  # (tile, o, group, chunk c, low/high, k)
    nibbles = (q[..., 0, :] | (q[..., 1, :] << 4)).permute(0, 2, 3, 1, 4).reshape(tiles, groups, 256)

    def per_tile(halves: torch.Tensor) -> torch.Tensor:
        return halves.reshape(tiles, TILE, groups).permute(0, 2, 1).contiguous().view(torch.uint8)

    return torch.cat([per_tile(scales), per_tile(minimums), nibbles], dim=-1).contiguous()


def dequantised(values: torch.Tensor, scales: torch.Tensor, minimums: torch.Tensor) -> torch.Tensor:
    """W as the kernel reads it, (out, in) float32: s * Q + m."""
    return (scales.float()[..., None] * values.float() + minimums.float()[..., None]).reshape(values.shape[0], -1)


def int4_product(
    x: torch.Tensor, packed: torch.Tensor, outputs: int, bias: torch.Tensor | None, march: str = "native"
) -> torch.Tensor:
    """x (rows, in) float32 times a :func:`pack_groups`-ed weight (outputs / 16, in / 32, 320), plus ``bias``
    (outputs,): (rows, outputs) float32, through the kernel compiled for ``march`` (this CPU's own instruction set by
    default)."""
    kernel = compiled_kernels(march)
    assert isinstance(kernel, Kernels), kernel
    weight = address("weight", packed, (outputs // TILE, x.shape[-1] // GROUP, BLOCK_BYTES), torch.uint8)
    return kernel_product(kernel, x, weight, outputs, None if bias is None else address("bias", bias, (outputs,)))


def kernel_product(kernel: Kernels, x: torch.Tensor, packed: int, outputs: int, bias: int | None) -> torch.Tensor:
    """:func:`int4_product` on the addresses of a packed weight and its bias (a layer's, read once: a draft's
    step makes some 170 of these calls, each a few microseconds of Python), x (rows, the weight's inputs): made
    contiguous float32 here, its shape all there is to check (:func:`~specviz.runtime.cpu.compiled.address` would
    double the call's Python)."""
    rows = x if x.dtype == torch.float32 and x.is_contiguous() else x.float().contiguous()
    if rows.dim() != 2:
        raise ValueError(f"x: the int4 product takes a matrix (rows, inputs), not a tensor of shape {tuple(x.shape)}")
    y = torch.empty(rows.shape[0], outputs)
    if rows.shape[0] and kernel.product(
        rows.data_ptr(), rows.shape[0], rows.shape[1], outputs, packed, bias, y.data_ptr()
    ):
        raise MemoryError("the int4 kernel could not allocate its activation rows")
    return y


class Int4Linear(nn.Module):
    """A Linear layer on 4-bit grouped weights (one packed copy, no float one), float32 in and out, through
    :func:`kernel_product`: ``groups`` where given (a published model's own 4-bit blocks,
    :mod:`specviz.runtime.cpu.q4k`), else its weight quantised by :func:`quantise_groups`. Its ``weight`` has the
    matrix's shape only (on the "meta" device)."""

    def __init__(self, linear: nn.Linear, groups: Groups | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.published = groups is not None  # the groups read from a published GGUF (specviz.runtime.cpu.q4k)
        self.packed = pack_groups(*(groups or quantise_groups(linear.weight)))
        self.bias: torch.Tensor | None = None if linear.bias is None else linear.bias.detach().float().contiguous()
        self.weight = torch.empty(self.out_features, self.in_features, device="meta")  # the shape; values packed
        kernel = compiled_kernels()
        assert isinstance(kernel, Kernels), kernel
        self.kernel = kernel
        self.place(self.packed, self.bias)

    def place(self, packed: torch.Tensor, bias: torch.Tensor | None) -> None:
        """Hold the packed weight and bias (equal to the ones held) in ``packed`` and ``bias``: views of a buffer the
        layer shares with others (:func:`share_one_buffer`)."""
        self.packed, self.bias = packed, bias
        self.addresses = (packed.data_ptr(), None if bias is None else bias.data_ptr())

    @property
    def matrix_bytes(self) -> int:
        """Bytes of the weight held outside the model's parameters: half a byte per weight, 4 bytes per group."""
        return self.packed.numel()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed, bias = self.addresses
        y = kernel_product(self.kernel, x.reshape(-1, self.in_features), packed, self.out_features, bias)
        return y.view(*x.shape[:-1], self.out_features).to(x.dtype)  # no copy where x is float32


JOINT_LAYERS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))  # a decoder layer's products of one input


def share_one_buffer(layers: list[Int4Linear]) -> None:
    """Lay the packed weights of layers that read the same input one after another in one buffer (their biases in
    another where every layer has one), each layer holding a view of its part: no byte more, and :func:`joint_of`
    multiplies them all in one kernel call. Done once, while a model is converted."""
    packed = torch.cat([layer.packed for layer in layers])
    biases = [layer.bias for layer in layers if layer.bias is not None]
    shared_bias = torch.cat(biases) if len(biases) == len(layers) else None
    tile_start = output_start = 0
    for layer in layers:
        tiles, outputs = layer.out_features // TILE, layer.out_features
        bias = layer.bias if shared_bias is None else shared_bias[output_start : output_start + outputs]
        layer.place(packed[tile_start : tile_start + tiles], bias)
        tile_start, output_start = tile_start + tiles, output_start + outputs


@dataclass(frozen=True)
class JointInt4:
    """Layers of one input whose packed weights (and biases) lie one after another (:func:`share_one_buffer`),
    multiplied in ONE kernel call: each output of the kernel depends only on its own weights and the row, so the
    call's outputs are, bit for bit, those of each layer called alone, for one kernel launch instead of several (the
    direct Llama step's q, k and v, and its gate and up: 7 calls a decoder layer become 4)."""

    kernel: Kernels
    addresses: tuple[int, int | None]
    in_features: int
    outputs: tuple[int, ...]

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        packed, bias = self.addresses
        y = kernel_product(self.kernel, x.reshape(-1, self.in_features), packed, sum(self.outputs), bias)
        return y.view(*x.shape[:-1], -1).split(self.outputs, dim=-1)


def joint_of(layers: list[nn.Module]) -> JointInt4 | None:
    """One call for ``layers`` where they are int4 layers of one input laid one after another in one buffer (their
    biases too, or none has one), else None."""
    if not all(isinstance(layer, Int4Linear) for layer in layers):
        return None
    int4 = [layer for layer in layers if isinstance(layer, Int4Linear)]
    biases = [layer.bias for layer in int4]

    def end_to_end(parts: list[torch.Tensor]) -> bool:
        return all(a.data_ptr() + a.numel() * a.element_size() == b.data_ptr() for a, b in zip(parts, parts[1:]))

    if len({layer.in_features for layer in int4}) != 1 or not end_to_end([layer.packed for layer in int4]):
        return None
    if any(b is None for b in biases) and not all(b is None for b in biases):
        return None
    if biases[0] is not None and not end_to_end([b for b in biases if b is not None]):
        return None
    first = int4[0]
    return JointInt4(first.kernel, first.addresses, first.in_features, tuple(layer.out_features for layer in int4))


def quantize_int4(model: nn.Module) -> int:
    """Put a freshly loaded float32 model's Linear layers on int4 (in place, before it is shared): its output head,
    any layer whose shape the kernel cannot take, and its input embedding on int8; its attention one query row at a
    time (:mod:`specviz.runtime.cpu.row_attention`), so a target on it is batch-invariant. Returns how many Linear
    layers changed. A decoder layer's q, k and v (and its gate and up) share one buffer (:func:`share_one_buffer`).
    A model fetched from a GGUF takes the file's own 4-bit blocks where it has them (:func:`published_groups`)."""
    head = model.get_output_embeddings() if isinstance(model, PreTrainedModel) else None
    module_names = {id(module): name for name, module in model.named_modules()}
    with published_groups(model) as published:

        def converted(layer: nn.Linear, _shared: bool) -> nn.Module:
            if layer is head or not packs_int4(layer):
                return Int8Linear(layer)
            return Int4Linear(layer, published(f"{module_names[id(layer)]}.weight"))

        changed = replace_linear_layers(model, converted)
    for module in model.modules():
        for names in JOINT_LAYERS:
            layers = [getattr(module, name, None) for name in names]
            if all(isinstance(layer, Int4Linear) for layer in layers):
                share_one_buffer(layers)  # type: ignore[arg-type]
    give_back_freed_heap()  # the layers' own buffers, freed by the sharing, back to the system
    quantise_input_embedding(model)
    attend_by_rows(model)
    return changed


@contextmanager
def published_groups(model: nn.Module) -> Iterator[Callable[[str], Groups | None]]:
    """While open: a weight's groups by its checkpoint name, read from the Q4_K blocks kept beside the model's
    checkpoint (:func:`specviz.runtime.cpu.q4k.write_q4k_blocks`; the file opened once, each tensor read when asked;
    None for a weight without its blocks there, or a model without the file)."""
    blocks_file = Path(str(getattr(model, "name_or_path", ""))) / Q4K_FILE
    if not blocks_file.is_file():
        yield lambda _name: None
        return
    with safe_open(blocks_file, "pt") as blocks:
        held = set(blocks.keys())
        yield lambda name: q4k_groups(blocks.get_tensor(name)) if name in held else None
