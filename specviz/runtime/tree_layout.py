"""Where a tree's nodes sit in a pass (tree attention: SpecInfer, Miao et al. 2023; Sequoia, Chen et al. 2024): each
new token's position id and what it may attend to. The forward protocol (:mod:`specviz.runtime.protocol`) and the
static passes (:mod:`specviz.runtime.static_passes`) both read it."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TreeLayout:
    """Where new tokens sit when they are not a plain continuation (tree attention, Miao et al. 2023;
    Jeon et al. 2024): each new token's position id and the cached-or-new tokens it may attend to."""

    positions: list[int]  # position id of each new token
    allowed: torch.Tensor  # (new, cached + new) bool: True where the new token may attend

    def additive_mask(self, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """The (1, 1, new, cached + new) float mask the attention adds to its scores: 0 or the dtype's minimum."""
        mask = torch.zeros(self.allowed.shape, dtype=dtype, device=device)
        mask.masked_fill_(~self.allowed.to(device), torch.finfo(dtype).min)
        return mask[None, None]
