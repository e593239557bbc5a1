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

RATES_FORMAT = 2  # bumped when what is measured changes (2: the int4 kernel's stream joins the bandwidth probe)


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


def int4_stream_gbs(megabytes: int, repeats: int) -> float:
    """The GB/s one row through an int4 matrix of about ``megabytes`` packed reaches (the int4 kernel's read stream,
    the step of a quantised target: :mod:`specviz.runtime.cpu.int4`), 0 where the C kernels are not built here."""
    from specviz.runtime.cpu.compiled import compiled_kernels
    from specviz.runtime.cpu.int4 import GROUP, LEVELS, Int4Linear

    if isinstance(compiled_kernels(), str):
        return 0.0
    inputs = 4096
    outputs = (megabytes * 2**20 * 8 // 5 // inputs) // 16 * 16  # 5 bits a weight: its nibble, its group's halves
    values = torch.randint(0, int(LEVELS) + 1, (outputs, inputs // GROUP, GROUP), dtype=torch.uint8)
    halves = torch.rand(outputs, inputs // GROUP).half()
    layer = Int4Linear(torch.nn.Linear(inputs, outputs, bias=False, device="meta"), (values, halves, halves))
    row = torch.randn(1, inputs)
    with torch.inference_mode():
        return layer.matrix_bytes / _median_seconds(lambda: layer(row), repeats) / 1e9


def measure_rates(megabytes: int = 256, repeats: int = 5) -> MachineRates:
    """Measure the bandwidth and the GFLOP/s of this machine's fastest exact kernels: the bandwidth is the fastest of
    summing a float32 buffer far larger than the caches, one row times a matrix of that size (the read stream a
    decoding step is) and one row through an int4 matrix of that size (a quantised step's own stream: on an AVX2 EPYC
    2.4x the float32 ones, about what llama.cpp's Q4_K step reaches there), the rate that of a (256 x 2048) @ (2048 x
    2048) product, in float32 and bfloat16, through oneDNN's packed kernel where it exists."""
    from specviz.runtime.cpu.kernel_paths import Projection, can_pack, pack

    def projection(weight: torch.Tensor) -> Projection:
        return Projection(weight, None, pack(weight) if can_pack(weight.dtype, weight.device) else None)

    side = int((megabytes * 2**20 // 4) ** 0.5)
    big, row = projection(torch.randn(side, side)), torch.randn(1, side)
    with torch.inference_mode():
        seconds = min(_median_seconds(big.weight.sum, repeats), _median_seconds(lambda: big(row), repeats))
        bandwidth = max(side * side * 4 / seconds / 1e9, int4_stream_gbs(megabytes // 2, repeats))
        gflops = {}
        for dtype in (torch.float32, torch.bfloat16):
            x, product = torch.randn(256, 2048, dtype=dtype), projection(torch.randn(2048, 2048, dtype=dtype))
            seconds = _median_seconds(functools.partial(product, x), repeats)
            gflops[str(dtype).replace("torch.", "")] = 2 * 256 * 2048 * 2048 / seconds / 1e9
    return MachineRates(bandwidth, gflops)


@functools.cache
def machine_rates() -> MachineRates:
    """:func:`measure_rates` once per machine (about a second), then read from ``$SPECVIZ_CACHE/machine``."""
    key = f"{machine_key()}|{RATES_FORMAT}"
    path = cache_root() / "machine" / f"rates-{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"
    try:
        return MachineRates(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        pass
    rates = measure_rates()
    write_json_atomically(path, dataclasses.asdict(rates))
    return rates
