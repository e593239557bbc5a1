"""The two trained parallel drafters as torch modules and their weights files: Blockwise heads (Stern et
al. 2018, in the Medusa form h + SiLU(W_i h)) and SpecDec's [MASK]-query Spec-Drafter (Xia et al. 2023), each
saved as a small safetensors file with its :class:`DrafterMeta` (shipped in ``specviz/weights/``; trained by
``python -m specviz train-drafter``). How they draft in a run is :mod:`specviz.drafters.parallel`."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from specviz import WEIGHTS_DIR
from specviz.registry.drafters import parallel_kinds


class BlockwiseHeads(nn.Module):
    """k residual heads on one hidden state: head_i(h) = h + SiLU(W_i h + b_i), zero-initialised so an
    untrained head starts as the target's own next-token predictor."""

    def __init__(self, hidden: int, k: int) -> None:
        super().__init__()
        self.k = k
        layers = [nn.Linear(hidden, hidden) for _ in range(k)]
        for layer in layers:
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)
        self.proj = nn.ModuleList(layers)

    def forward(self, memory: torch.Tensor, pending: torch.Tensor) -> torch.Tensor:
        """memory (B, W, H) target states ending at t; pending (B, H) unused -> (B, k, H)."""
        h = memory[:, -1]  # (B, H): the one state every head shares
        return torch.stack([h + nn.functional.silu(proj(h)) for proj in self.proj], dim=1)

    def attention(self, memory: torch.Tensor, pending: torch.Tensor) -> torch.Tensor:
        """Which inputs each head reads: all weight on h_t, for every head (B, k, W + 1 + k)."""
        batch, window, _ = memory.shape
        pattern = torch.zeros(batch, self.k, window + 1 + self.k)
        pattern[:, :, window - 1] = 1.0
        return pattern


class MaskQueryDrafter(nn.Module):
    """k [MASK] queries + the pending token, one pre-norm transformer block over the target's last states."""

    def __init__(self, hidden: int, k: int, window: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.k, self.window = k, window
        self.masks = nn.Parameter(torch.randn(k, hidden) * 0.02)  # the learned [MASK] query embeddings
        self.positions = nn.Parameter(torch.zeros(window + 1 + k, hidden))  # memory slots, pending, masks
        self.norm_in = nn.LayerNorm(hidden)
        self.attn = nn.MultiheadAttention(hidden, heads, batch_first=True)
        self.norm_mlp = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.SiLU(), nn.Linear(2 * hidden, hidden))

    def _sequence(self, memory: torch.Tensor, pending: torch.Tensor) -> torch.Tensor:
        batch, window, _ = memory.shape
        masks = self.masks.expand(batch, -1, -1)
        seq = torch.cat([memory, pending[:, None], masks], dim=1)  # (B, W + 1 + k, H)
        return seq + self.positions[-seq.shape[1] :]

    def forward(self, memory: torch.Tensor, pending: torch.Tensor) -> torch.Tensor:
        """memory (B, W, H), pending (B, H) -> (B, k, H): one vector per [MASK] query."""
        seq = self.norm_in(self._sequence(memory, pending))
        queries = seq[:, -self.k :]  # each [MASK] has its own query: distinct attention
        out, _ = self.attn(queries, seq, seq, need_weights=False)
        x = self._sequence(memory, pending)[:, -self.k :] + out
        return x + self.mlp(self.norm_mlp(x))

    def attention(self, memory: torch.Tensor, pending: torch.Tensor) -> torch.Tensor:
        """The block's real attention weights, averaged over heads: (B, k, W + 1 + k)."""
        seq = self.norm_in(self._sequence(memory, pending))
        _, weights = self.attn(seq[:, -self.k :], seq, seq, need_weights=True, average_attn_weights=True)
        return weights


ParallelModule = BlockwiseHeads | MaskQueryDrafter  # a trained parallel drafter's module


def build_module(kind: str, hidden: int, k: int, window: int) -> ParallelModule:
    if kind == "blockwise":
        return BlockwiseHeads(hidden, k)
    if kind == "maskquery":
        return MaskQueryDrafter(hidden, k, window)
    raise ValueError(f"unknown parallel drafter {kind!r}; choose from {', '.join(parallel_kinds())}")


@dataclass
class DrafterMeta:
    """What a weights file was trained for; stored in the safetensors metadata."""

    kind: str
    k: int
    hidden: int
    window: int
    vocab: int  # the target's output vocabulary size
    target: str  # the target's model spec
    steps: int = 0
    seed: int = 0
    final_loss: float = 0.0
    command: str = ""


def save_drafter(module: nn.Module, meta: DrafterMeta, path: Path) -> None:
    tensors = {name: t.detach().to(torch.float16).contiguous() for name, t in module.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path), metadata={"specviz": json.dumps(meta.__dict__)})


@functools.lru_cache(maxsize=8)
def load_drafter(path: str, device: str = "cpu") -> tuple[ParallelModule, DrafterMeta]:
    """A trained drafter from a safetensors file (no pickle), float32, eval mode, on ``device``;
    loaded once per process and shared read-only, like the models."""
    from safetensors import safe_open

    if not Path(path).is_file():
        raise FileNotFoundError(f"no drafter weights at {path}")
    with safe_open(path, framework="pt") as f:
        meta = DrafterMeta(**json.loads(f.metadata()["specviz"]))
    module = build_module(meta.kind, meta.hidden, meta.k, meta.window)
    module.load_state_dict({name: t.float() for name, t in load_file(path).items()})
    return module.to(device).eval().requires_grad_(False), meta


def default_weights(kind: str) -> Path:
    return WEIGHTS_DIR / f"smollm2-135m-{kind}.safetensors"
