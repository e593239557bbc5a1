"""What this machine offers a model: the device, the memory free now, the CPU's matrix units."""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from safetensors import safe_open

from specviz.models.errors import ModelLoadError

SHARED_KV_HEADS_FLAG = "TRANSFORMERS_SDPA_FORCE_GQA"  # transformers' switch, read at every attention call


def resolve_device(device: str = "auto") -> torch.device:
    """'auto' picks CUDA when available, else the CPU; anything else is passed to torch."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ModelLoadError(f"Unknown device {device!r}: use auto, cpu or cuda") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"Device {device!r} asked for, but this machine has no CUDA GPU")
    return resolved


def share_kv_heads_in_masked_attention(device: torch.device) -> None:
    """On a machine without a GPU, let every attention call read grouped key/value heads in place.

    With grouped-query attention (SmolLM2: 9 query heads share 3 key/value heads) transformers copies
    each layer's cached keys and values 3 times (``repeat_kv``) before a pass that carries a mask, which
    is every verification pass over gamma + 1 tokens, unless ``TRANSFORMERS_SDPA_FORCE_GQA`` is set; a
    one-token step has no mask and shares the heads already. torch's CPU kernel takes ``enable_gqa``
    together with a mask and gives the same logits bit for bit (tests/test_engine.py: a causal pass, and
    whole traces through a tree mask, the layer-skip loop's mask and bfloat16). transformers keeps the
    copy on CUDA, where a masked GQA call leaves the fast kernels, so the switch is only set when no GPU is
    present; a user's own value wins.
    It holds for the whole process, so transformers' own ``generate`` and assisted generation, the
    benchmarks' baselines, run with it too.
    """
    if device.type == "cpu" and not torch.cuda.is_available():
        os.environ.setdefault(SHARED_KV_HEADS_FLAG, "1")


def cpu_matrix_units() -> str:
    """What this CPU's matrix kernels can do with bfloat16, in words (torch's dispatch level: AMX tiles multiply
    bf16 natively, so a pass over several tokens costs about one; AVX2 converts bf16 to float32 first)."""
    level = torch.backends.cpu.get_cpu_capability()
    native = level.startswith("AMX") or level.endswith("BF16")
    return (f"CPU kernels {level}: " + ("bfloat16 matrix units, so in bfloat16 a pass over a few tokens costs about "
                                        "one token's step" if native else
                                        "no bfloat16 matrix units, so bfloat16 halves the weights' memory traffic but "
                                        "a pass over k tokens costs about k one-token steps"))


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (what the kernel can hand out without swapping), None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def weights_bytes(directory: Path, dtype: torch.dtype) -> int:
    """The bytes a checkpoint directory's weights take in memory at ``dtype``, read from its safetensors headers."""
    count = 0
    for file in directory.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                count += math.prod(f.get_slice(name).get_shape())
    return count * torch.empty((), dtype=dtype).element_size()


def check_memory(source: str, dtype: torch.dtype, device: torch.device) -> None:
    """Refuse, before loading, a local model whose weights do not fit in the memory this machine has free now
    (a model already loaded is shared, so this only guards a new one)."""
    free = available_memory_bytes() if device.type == "cpu" else None
    if free is None or not Path(source).is_dir():
        return
    needed = weights_bytes(Path(source), dtype)
    if needed > free:
        raise ModelLoadError(f"{source} needs about {needed / 1e9:.1f} GB of memory in "
                             f"{str(dtype).replace('torch.', '')}; "
                             f"this machine has {free / 1e9:.1f} GB free now. "
                             "Pick a lower precision or a smaller model.")
