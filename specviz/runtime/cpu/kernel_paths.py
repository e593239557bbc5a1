"""Which matrix kernel multiplies a model's Linear layers on a CPU: torch's default, or oneDNN on packed weights.

Decoding is a sequence of matrix products of a few rows (the new tokens) by every weight matrix of the model,
so the kernel that multiplies them decides what a step and a verification pass over k + 1 tokens cost.
torch multiplies float32 on an x86 CPU with MKL's sgemm, which takes a slow path on AMD CPUs (pytorch/builder
#460 and #1245, pytorch #38412): there a product of 2 rows can cost twice one of 1 row. oneDNN, the library torch
already uses for bfloat16, multiplies float32 in float32 too (IEEE arithmetic, no bfloat16 inside: torch's
``fp32_precision`` stays "ieee"), and with each weight packed once into oneDNN's blocked layout
(``torch.ops.mkldnn._reorder_linear_weight``, as torch's own compiler does for CPU inference) a pass over a few
rows streams the weight at close to the memory bandwidth. The two kernels add in a different order, so their
float32 results differ in the last bits, as any two exact kernels may; what keeps greedy speculative decoding
token-identical is that the target's own decoding and the speculative one run the SAME kernels. So a kernel path
belongs to a loaded model, chosen once at load (by the machine profile, :mod:`specviz.models.profile`), and every
caller of that model (the engine, the drafts' direct Llama step, transformers' ``generate``) multiplies through it.

Paths: ``default`` (torch's own choice: MKL for float32, oneDNN for bfloat16) and ``onednn`` (packed weights), both
exact in the model's precision; and ``int8`` and ``int4`` (int8 or grouped 4-bit matrices, each activation row
quantised on the fly, products in int32: :mod:`specviz.runtime.cpu.int8`, :mod:`specviz.runtime.cpu.int4`), precisions
of their own: a draft on one changes how often its tokens are accepted, never the output, and a target on one is exact
to itself (the quantised target as run decides every token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specviz.runtime.cpu.int4 import Int4Linear
from specviz.runtime.cpu.int8 import Int8Linear, Int8Matrix, int8_linear
from specviz.runtime.cpu.mapped_pages import replace_linear_layers

DEFAULT, ONEDNN, INT8, INT4 = "default", "onednn", "int8", "int4"
QUANTISED = (INT8, INT4)  # precisions of their own: quantised weights, one kernel each
KERNEL_PATHS = (DEFAULT, ONEDNN)  # the exact paths a model's profile chooses between (int8 is a precision)
PACKABLE_DTYPES = (torch.float32, torch.bfloat16)  # oneDNN's packed inference kernels on x86 CPUs


def can_pack(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the ``onednn`` path exists for weights of ``dtype`` on ``device``: a CPU build with oneDNN, and for
    bfloat16 a CPU whose oneDNN kernels take it (AVX-512 BW/VL/DQ or AVX-NE-CONVERT: an AVX2-only CPU has no such
    path, and its bfloat16 weights keep torch's default one)."""
    if device.type != "cpu" or dtype not in PACKABLE_DTYPES or not torch.backends.mkldnn.is_available():
        return False
    return dtype != torch.bfloat16 or bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` (out, in) reordered once into oneDNN's blocked layout (opaque; ``to_dense`` reads it back)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (..., in) @ W^T + b through oneDNN on a :func:`pack`-ed W: (..., out), in x's dtype (inference only)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedLinear(nn.Module):
    """A Linear layer whose product runs through oneDNN on its weight packed once. The packed copy is the only one
    (``weight`` unpacks it on demand) unless another module shares the weight (a tied input embedding reads it, so a
    tied head is held twice). The bias stays the original parameter; the state dict is the replaced layer's."""

    shared: torch.Tensor | None

    def __init__(self, linear: nn.Linear, shared: bool) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.bias = linear.bias
        self.packed = pack(linear.weight)  # not a buffer: derived; saved as the weight it packs
        # a tied weight, kept for the module that shares it (not registered here: it is that module's parameter)
        self.__dict__["shared"] = linear.weight if shared else None

    @property
    def weight(self) -> torch.Tensor:
        """The weight (out, in): the shared one, else unpacked from oneDNN's layout (a new tensor each time)."""
        return self.shared if self.shared is not None else self.packed.to_dense()

    @property
    def matrix_bytes(self) -> int:
        """Bytes of the weight held outside the model's parameters (the packed copy, when it is the only one)."""
        return 0 if self.shared is not None else self.in_features * self.out_features * self.packed.element_size()

    def _save_to_state_dict(self, destination: dict[str, Any], prefix: str, keep_vars: bool) -> None:
        """The state dict of the ``nn.Linear`` it replaced: ``weight`` (unpacked) and ``bias``."""
        destination[prefix + "weight"] = self.weight if keep_vars else self.weight.detach()
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return packed_linear(x, self.packed, self.bias)

    def plain(self) -> nn.Linear:
        """The same layer as a plain ``nn.Linear`` (torch's default kernel) on the same weight values and bias."""
        linear = nn.Linear.__new__(nn.Linear)
        nn.Module.__init__(linear)
        linear.in_features, linear.out_features = self.in_features, self.out_features
        weight = self.weight
        linear.weight = weight if isinstance(weight, nn.Parameter) else nn.Parameter(weight, requires_grad=False)
        linear.bias = self.bias
        return linear


def use_kernels(model: nn.Module, path: str) -> int:
    """Put every Linear layer of ``model`` on kernel ``path`` (in place; the loader does it once, before the model
    is shared). Returns how many layers changed."""
    if path not in KERNEL_PATHS:
        raise ValueError(f"unknown kernel path {path!r}; one of {', '.join(KERNEL_PATHS)}")
    if path == ONEDNN:
        return replace_linear_layers(model, PackedLinear)
    changed = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, PackedLinear):
                setattr(parent, name, child.plain())
                changed += 1
    return changed


def kernels_of(model: nn.Module) -> str:
    """The kernel path a model's Linear layers run on (``int4``, ``int8`` or ``onednn`` if any of them is so)."""
    modules = list(model.modules())
    if any(isinstance(m, Int4Linear) for m in modules):
        return INT4
    if any(isinstance(m, Int8Linear) for m in modules):
        return INT8
    return ONEDNN if any(isinstance(m, PackedLinear) for m in modules) else DEFAULT


@dataclass(frozen=True)
class Projection:
    """x -> x W^T + b as a Linear layer of a model computes it: through its packed weight where the model runs on
    oneDNN, else torch's ``F.linear``. The drafts' direct Llama step (:mod:`specviz.runtime.llama_step`) multiplies
    through these, so a draft runs the same kernels as its model's own forward."""

    weight: torch.Tensor  # (out, in); its shape only (on "meta") where ``packed`` or ``int8`` holds the values
    bias: torch.Tensor | None = None  # (out,)
    packed: torch.Tensor | None = None  # the weight as :func:`pack` made it, or None
    int8: Int8Matrix | None = None  # the weight and bias of an :class:`Int8Linear`, or None
    int4: Int4Linear | None = None  # the layer itself where it is on int4, or None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.int8 is not None:
            return int8_linear(x, self.int8).to(x.dtype)
        if self.int4 is not None:
            return self.int4(x)
        if self.packed is None:
            return F.linear(x, self.weight, self.bias)
        return packed_linear(x, self.packed, self.bias)

    @classmethod
    def of(cls, linear: nn.Module) -> Projection:
        if isinstance(linear, Int8Linear):
            return cls(linear.weight, int8=linear.matrix)
        if isinstance(linear, Int4Linear):
            return cls(linear.weight, int4=linear)
        assert isinstance(linear, nn.Linear | PackedLinear), "a projection is a Linear layer's"
        bias = linear.bias.detach() if linear.bias is not None else None
        if isinstance(linear, PackedLinear):  # the weight's shape only: its values are the packed copy's
            return cls(torch.empty(linear.out_features, linear.in_features, device="meta"), bias, linear.packed)
        return cls(linear.weight.detach(), bias)

    def rows(self, ids: torch.Tensor) -> Projection:
        """The projection onto the output rows ``ids`` only (FR-Spec's trimmed head), on the same kernel path."""
        assert self.int4 is None, "an int4 model's output head stays int8 (specviz.runtime.cpu.int4)"
        if self.int8 is not None:
            return Projection(torch.empty(len(ids), self.weight.shape[1], device="meta"), int8=self.int8.rows(ids))
        weight = (self.packed.to_dense() if self.packed is not None else self.weight)[ids].clone()
        bias = self.bias[ids].clone() if self.bias is not None else None
        return Projection(weight, bias, pack(weight) if self.packed is not None else None)
