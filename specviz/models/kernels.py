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
caller of that model (the engine, the drafts' lean step, transformers' ``generate``) multiplies through it.

Paths: ``default`` (torch's own choice: MKL for float32, oneDNN for bfloat16) and ``onednn`` (packed weights).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

DEFAULT, ONEDNN = "default", "onednn"
KERNEL_PATHS = (DEFAULT, ONEDNN)
PACKABLE_DTYPES = (torch.float32, torch.bfloat16)  # oneDNN's packed inference kernels on x86 CPUs


def can_pack(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether the ``onednn`` path exists for weights of ``dtype`` on ``device`` (a CPU build with oneDNN)."""
    return device.type == "cpu" and dtype in PACKABLE_DTYPES and torch.backends.mkldnn.is_available()


def pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` (out, in) reordered once into oneDNN's blocked layout (an opaque tensor beside the original)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (..., in) @ W^T + b through oneDNN on a :func:`pack`-ed W: (..., out), in x's dtype (inference only)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` whose product runs through oneDNN on its weight packed once; the weight and bias are the
    original parameters (shared, so tied weights stay tied and the state dict is unchanged)."""

    def __init__(self, linear: nn.Linear) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.packed = pack(linear.weight)  # not a buffer: derived, never saved

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return packed_linear(x, self.packed, self.bias)

    def plain(self) -> nn.Linear:
        """The same layer as a plain ``nn.Linear`` (torch's default kernel), on the same parameters."""
        linear = nn.Linear.__new__(nn.Linear)
        nn.Module.__init__(linear)
        linear.in_features, linear.out_features = self.in_features, self.out_features
        linear.weight, linear.bias = self.weight, self.bias
        return linear


def use_kernels(model: nn.Module, path: str) -> int:
    """Put every Linear layer of ``model`` on kernel ``path`` (in place; the loader does it once, before the model
    is shared). Returns how many layers changed."""
    if path not in KERNEL_PATHS:
        raise ValueError(f"unknown kernel path {path!r}; one of {', '.join(KERNEL_PATHS)}")
    changed = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if path == ONEDNN and type(child) is nn.Linear:
                setattr(parent, name, PackedLinear(child))
            elif path == DEFAULT and isinstance(child, PackedLinear):
                setattr(parent, name, child.plain())
            else:
                continue
            changed += 1
    return changed


def kernels_of(model: nn.Module) -> str:
    """The kernel path a model's Linear layers run on (``onednn`` if any of them is packed)."""
    return ONEDNN if any(isinstance(m, PackedLinear) for m in model.modules()) else DEFAULT


@dataclass(frozen=True)
class Projection:
    """x -> x W^T + b as a Linear layer of a model computes it: through its packed weight where the model runs on
    oneDNN, else torch's ``F.linear``. The drafts' lean step (:mod:`specviz.models.llama_step`) multiplies through
    these, so a draft runs the same kernels as its model's own forward."""

    weight: torch.Tensor  # (out, in)
    bias: torch.Tensor | None = None  # (out,)
    packed: torch.Tensor | None = None  # the weight as :func:`pack` made it, or None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is None:
            return F.linear(x, self.weight, self.bias)
        return packed_linear(x, self.packed, self.bias)

    @classmethod
    def of(cls, linear: nn.Linear) -> Projection:
        bias = linear.bias.detach() if linear.bias is not None else None
        return cls(linear.weight.detach(), bias, getattr(linear, "packed", None))

    def rows(self, ids: torch.Tensor) -> Projection:
        """The projection onto the output rows ``ids`` only (FR-Spec's trimmed head), on the same kernel path."""
        weight = self.weight[ids].clone()
        bias = self.bias[ids].clone() if self.bias is not None else None
        return Projection(weight, bias, pack(weight) if self.packed is not None else None)
