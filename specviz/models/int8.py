"""A draft's int8 precision: int8 weight matrices, activations quantised to 8 bits on the fly (dynamic quantisation).

A draft only proposes and the target decides every token, so a coarser draft changes how often its tokens are
accepted, never the output; and a step that streams a quarter of float32's bytes costs about a quarter on a CPU
whose steps are memory-bound. torch's x86 quantised engine (fbgemm or oneDNN, with VNNI dot products where the CPU
has them) multiplies an int8 row by an int8 matrix and rescales to float32.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from specviz.models.mapped_pages import replace_linear_layers


def int8_runs_on(device: torch.device) -> bool:
    """Whether :class:`Int8Linear` runs on ``device``: a CPU whose torch has a quantised engine (fbgemm or oneDNN on
    x86, with VNNI where the CPU has it)."""
    return device.type == "cpu" and torch.backends.quantized.engine in ("x86", "fbgemm", "onednn")


def prepack_int8(weight: torch.Tensor, bias: torch.Tensor | None) -> Any:
    """W (out, in) as int8 rows packed for the engine: symmetric per row, W ~ s[:, None] * Q with s = max_j |W_ij| /
    127 and Q = round(W / s) in [-127, 127] (vector-wise quantisation, Dettmers et al. 2022, LLM.int8 without the
    outliers); float ``bias`` (out,) added after the product."""
    w = weight.detach().float()
    scales = w.abs().amax(dim=1).clamp(min=1e-12) / 127  # (out,)
    zeros = torch.zeros(w.shape[0], dtype=torch.long)
    with warnings.catch_warnings():  # torch marks its quantised tensors for removal in a later release
        warnings.simplefilter("ignore", UserWarning)
        q = torch.quantize_per_channel(w, scales.double(), zeros, 0, torch.qint8)
    return torch.ops.quantized.linear_prepack(q, None if bias is None else bias.detach().float())


def int8_linear(x: torch.Tensor, packed: Any, out_features: int) -> torch.Tensor:
    """x (..., in) @ W^T + b on :func:`prepack_int8`-ed W: each row of x quantised to 8 bits on the fly (dynamic
    quantisation, Jacob et al. 2018), the products summed in int32 and rescaled to float32 (..., out)."""
    rows = x.reshape(-1, x.shape[-1]).float()
    return torch.ops.quantized.linear_dynamic(rows, packed, True).view(*x.shape[:-1], out_features)


class Int8Linear(nn.Module):
    """A Linear layer on int8 weights (:func:`prepack_int8`; one packed copy, no float one) and dynamically quantised
    activations (:func:`int8_linear`): a quarter of float32's bytes per step. Lossy, so only drafts take it. Its
    ``weight`` has the matrix's shape only (a tensor on the "meta" device: reading its values fails loudly)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.packed = prepack_int8(linear.weight, linear.bias)
        self.weight = torch.empty(self.out_features, self.in_features, device="meta")  # the shape; values in packed

    @property
    def matrix_bytes(self) -> int:
        """Bytes of the weight held outside the model's parameters: a byte per weight."""
        return self.in_features * self.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return int8_linear(x, self.packed, self.out_features)


def quantize_int8(model: nn.Module) -> int:
    """Put every Linear layer of a freshly loaded float32 ``model`` on int8 (in place, before the model is shared);
    the embedding and norms stay float32. Returns how many layers changed."""
    return replace_linear_layers(model, lambda layer, _shared: Int8Linear(layer))
