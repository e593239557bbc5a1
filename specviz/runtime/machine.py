"""What this machine offers a model: the device, the memory free now, the CPU's matrix units (its roofline's
slopes: :mod:`specviz.models.rates`)."""

from __future__ import annotations

import ctypes
import logging
import math
import os
from pathlib import Path

import torch
from safetensors import safe_open

from specviz.settings import ModelLoadError

log = logging.getLogger(__name__)

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


def device_wait(device: torch.device) -> None:
    """Wait until the work queued on ``device`` has run: a CUDA GPU runs its kernels after the host queued them, so a
    clock read right after a pass times the launches, not the GPU (torch.cuda.synchronize, as gpt-fast's and
    transformers' benchmarks time). Nothing on a CPU, whose passes return when they are done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's word for it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (/proc/cpuinfo), empty where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def matrix_units_in_words(flags: frozenset[str] | None = None) -> str:
    """What the CPU's vector and matrix units offer decoding, in words, from its flags."""
    flags = cpu_flags() if flags is None else flags
    if not flags:
        return "CPU features unknown"
    if "amx_bf16" in flags:
        units = "AMX tiles (bfloat16 matrix multiply in hardware)"
    elif "avx512_bf16" in flags:
        units = "AVX-512 with bfloat16 dot products (avx512_bf16), no AMX"
    elif "avx512f" in flags:
        units = "AVX-512 without bfloat16 instructions"
    elif "avx2" in flags:
        units = "AVX2 only (bfloat16 is converted to float32 to multiply)"
    else:
        units = "no AVX2"
    return f"{units}; torch kernels {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads"


def machine_key() -> str:
    """What makes one machine's timings differ from another's: CPU, flags, threads, torch."""
    flags = ",".join(sorted(f for f in cpu_flags() if f.startswith(("avx", "amx", "fma"))))
    return f"{cpu_name()}|{flags}|{torch.get_num_threads()}|{torch.__version__}"


def meminfo_bytes(field: str) -> int | None:
    """A field of /proc/meminfo ("MemAvailable", "MemTotal") in bytes, None where unknown (not Linux)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def available_memory_bytes() -> int | None:
    """MemAvailable (what the kernel can hand out without swapping), None where unknown."""
    return meminfo_bytes("MemAvailable")


MEMORY_SHARE = 0.8  # of the machine's memory a server's models may take ($SPECVIZ_MEMORY_SHARE): the rest is the OS's


def memory_budget_bytes() -> int | None:
    """The memory this process's models may fill: ``$SPECVIZ_MEMORY_SHARE`` (default 0.8) of MemTotal; None where
    the total is unknown (not Linux). A malformed share is reported and the default used."""
    total = meminfo_bytes("MemTotal")
    try:
        share = float(os.environ.get("SPECVIZ_MEMORY_SHARE", MEMORY_SHARE))
    except ValueError:
        log.warning(
            "SPECVIZ_MEMORY_SHARE=%r is not a number; using %s", os.environ["SPECVIZ_MEMORY_SHARE"], MEMORY_SHARE
        )
        share = MEMORY_SHARE
    return None if total is None else int(total * min(max(share, 0.0), 1.0))


def resident_bytes() -> int:
    """This process's resident memory now (0 where unknown)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def give_back_freed_heap() -> None:
    """Return the C heap's freed pages to the system (glibc's ``malloc_trim``): a dropped model's tensors are freed
    to the allocator, which keeps them, so the process's resident memory, what the memory budget reads, would stay
    as high as before. Nothing happens where the C library has no ``malloc_trim``."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


STORED_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I8": 1, "U8": 1}  # per safetensors dtype


def weights_bytes(directory: Path, dtype: torch.dtype | None = None) -> int:
    """The bytes a checkpoint directory's weights take in memory at ``dtype`` (None: as stored in its files), read
    from its safetensors headers."""
    size = torch.empty((), dtype=dtype).element_size() if dtype is not None else None
    total = 0
    for file in directory.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                tensor = f.get_slice(name)
                total += math.prod(tensor.get_shape()) * (size or STORED_BYTES.get(tensor.get_dtype(), 4))
    return total


def check_memory(source: str, dtype: torch.dtype, device: torch.device) -> None:
    """Refuse, before loading, a local model whose weights do not fit in the memory this machine has free now
    (a model already loaded is shared, so this only guards a new one)."""
    free = available_memory_bytes() if device.type == "cpu" else None
    if free is None or not Path(source).is_dir():
        return
    needed = weights_bytes(Path(source), dtype)
    if needed > free:
        raise ModelLoadError(
            f"{source} needs about {needed / 1e9:.1f} GB of memory in "
            f"{str(dtype).replace('torch.', '')}; "
            f"this machine has {free / 1e9:.1f} GB free now. "
            "Pick a lower precision or a smaller model."
        )
