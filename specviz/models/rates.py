"""This machine's roofline (Williams et al. 2009): the memory bandwidth a decoding step's read stream reaches and
the arithmetic rate of its matrix kernels, measured once per machine and cached."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from specviz.cache import cache_root, write_json_atomically
from specviz.runtime.machine import machine_key


@dataclass(frozen=True)
class MachineRates:
    """The two slopes of this machine's roofline (Williams et al. 2009): the memory bandwidth a long read stream
    reaches (GB/s) and the arithmetic rate a large matrix product reaches in each precision (GFLOP/s), on the
    fastest exact kernel path."""

    bandwidth_gbs: float
    gflops: dict[str, float]  # precision name -> GFLOP/s

    def memory_bound_ms(self, weight_bytes: int) -> float:
        """The least time a pass that reads ``weight_bytes`` once can take: bytes / bandwidth."""
        return weight_bytes / self.bandwidth_gbs / 1e6

    def compute_bound_ms(self, parameters: int, tokens: int, dtype: str) -> float:
        """The least time the arithmetic of a pass over ``tokens`` tokens can take: 2 N tokens FLOPs / rate."""
        return 2 * parameters * tokens / self.gflops[dtype] / 1e6


def _median_seconds(run: Callable[[], object], repeats: int) -> float:
    run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_rates(megabytes: int = 256, repeats: int = 5) -> MachineRates:
    """Measure the bandwidth and the GFLOP/s of this machine's fastest exact kernels: the bandwidth is the faster of
    summing a float32 buffer far larger than the caches and one row times a matrix of that size (the read stream a
    decoding step is), the rate that of a (256 x 2048) @ (2048 x 2048) product, in float32 and bfloat16, through
    oneDNN's packed kernel where it exists."""
    from specviz.runtime.cpu.kernel_paths import Projection, can_pack, pack

    def projection(weight: torch.Tensor) -> Projection:
        return Projection(weight, None, pack(weight) if can_pack(weight.dtype, weight.device) else None)

    side = int((megabytes * 2**20 // 4) ** 0.5)
    big, row = projection(torch.randn(side, side)), torch.randn(1, side)
    with torch.inference_mode():
        seconds = min(_median_seconds(big.weight.sum, repeats), _median_seconds(lambda: big(row), repeats))
        bandwidth = side * side * 4 / seconds / 1e9
        gflops = {}
        for dtype in (torch.float32, torch.bfloat16):
            x, product = torch.randn(256, 2048, dtype=dtype), projection(torch.randn(2048, 2048, dtype=dtype))
            seconds = _median_seconds(functools.partial(product, x), repeats)
            gflops[str(dtype).replace("torch.", "")] = 2 * 256 * 2048 * 2048 / seconds / 1e9
    return MachineRates(bandwidth, gflops)


@functools.cache
def machine_rates() -> MachineRates:
    """:func:`measure_rates` once per machine (about a second), then read from ``$SPECVIZ_CACHE/machine``."""
    path = cache_root() / "machine" / f"rates-{hashlib.sha256(machine_key().encode()).hexdigest()[:20]}.json"
    try:
        return MachineRates(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        pass
    rates = measure_rates()
    write_json_atomically(path, dataclasses.asdict(rates))
    return rates
