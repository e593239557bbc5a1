"""A draft's int4 precision: 4-bit weights in groups of 32, each group with its own scale and zero (GPTQ's and AWQ's
layout: Frantar et al. 2023; Lin et al. 2024), multiplied by bfloat16 activations through torch's CPU int4 kernel.

    W_ji ~ (Q_ji - 8) * s_jg + z_jg,   Q_ji in 0..15,   s_jg = (max_g W_j - min_g W_j) / 15,   z_jg = min_g W_j + 8 s_jg

for the group g of 32 inputs that holds i. A step reads half of int8's bytes (an eighth of float32's, scales aside).
The products run in bfloat16 and the layer returns float32, so the result depends on how many rows share a pass: not
exact to itself, which only a draft may be (the target decides every token, so a coarser draft changes how often
its tokens are accepted, never the output). The output head stays int8 (:mod:`specviz.models.int8`): FR-Spec trims
its rows, and a head of a few thousand rows costs little.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from specviz.models.int8 import Int8Linear, quantise_input_embedding
from specviz.models.mapped_pages import replace_linear_layers

GROUP = 32  # inputs per scale and zero
LEVELS = 15  # 4 bits: 0..15, centred on 8
INNER_K_TILES = 2  # torch's packing parameter for its CPU int4 kernel


def int4_runs_on(device: torch.device) -> bool:
    """Whether :class:`Int4Linear` runs on ``device``: a CPU whose torch has the int4 kernel."""
    return device.type == "cpu" and hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")


def packs_int4(linear: nn.Linear) -> bool:
    """Whether a layer's shape suits the kernel: whole groups and tiles of inputs, whole tiles of outputs."""
    inputs, outputs = linear.in_features, linear.out_features
    return inputs % GROUP == 0 and inputs % (INNER_K_TILES * 16) == 0 and outputs % 16 == 0


class Int4Linear(nn.Module):
    """A Linear layer on 4-bit grouped weights (one packed copy, no float one): bfloat16 activations in, float32 out.
    Its ``weight`` has the matrix's shape only (on the "meta" device)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach().float().reshape(self.out_features, -1, GROUP)
        low, high = w.amin(dim=-1, keepdim=True), w.amax(dim=-1, keepdim=True)
        scales = ((high - low) / LEVELS).clamp(min=1e-8)
        values = torch.round((w - low) / scales).clamp(0, LEVELS).reshape(self.out_features, -1).to(torch.int32)
        zeros = low + 8 * scales  # (Q - 8) * s + z = low + Q * s
        self.packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(values, INNER_K_TILES)
        groups = (scales.squeeze(-1), zeros.squeeze(-1))  # (out, in / GROUP) each
        self.scales_and_zeros = torch.stack(groups, dim=-1).transpose(0, 1).contiguous().to(torch.bfloat16)
        self.bias = None if linear.bias is None else linear.bias.detach().float()
        self.weight = torch.empty(self.out_features, self.in_features, device="meta")  # the shape; values packed

    @property
    def matrix_bytes(self) -> int:
        """Bytes of the weight held outside the model's parameters: half a byte per weight, 4 bytes per group."""
        return self.out_features * self.in_features // 2 + self.scales_and_zeros.numel() * 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.bfloat16)
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(rows, self.packed, GROUP, self.scales_and_zeros).float()
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features).to(x.dtype)


def quantize_int4(model: nn.Module) -> int:
    """Put a freshly loaded float32 draft's Linear layers on int4 (in place, before it is shared): its output head,
    any layer whose shape the kernel cannot take, and its input embedding, on int8. Returns how many Linear layers
    changed."""
    head = model.get_output_embeddings() if isinstance(model, PreTrainedModel) else None

    def converted(layer: nn.Linear, _shared: bool) -> nn.Module:
        return Int4Linear(layer) if layer is not head and packs_int4(layer) else Int8Linear(layer)

    changed = replace_linear_layers(model, converted)
    quantise_input_embedding(model)
    return changed
