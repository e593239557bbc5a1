"""Benchmark: the int4 kernel alone (``specviz/runtime/cpu/int4_rows.c``) over a model's matrices, one pass of k rows.

For every Linear layer shape of a Qwen2.5 model of the given size (random weights, packed as the app packs them),
one pass of k activation rows through all of them, best of ``--repeats``: milliseconds, the bytes streamed per
second, and v(k), the pass over k rows against one row (flat: near 1; the kernel's one-row pass is memory-bound,
its VNNI dot products take over as rows are added).

    .venv/bin/python -m benchmarks.bench_int4_kernel [--hidden 1536 --intermediate 8960 --kv 256 --layers 28]
"""

from __future__ import annotations

import argparse
import time

import torch

from specviz.runtime.cpu.int4 import Int4Linear
from specviz.runtime.machine import cpu_name


def layer_shapes(hidden: int, intermediate: int, kv: int) -> list[tuple[int, int]]:
    """(outputs, inputs) of one decoder layer's projections: q, k, v, o, gate, up, down."""
    return (
        [(hidden, hidden), (kv, hidden), (kv, hidden), (hidden, hidden)]
        + [(intermediate, hidden)] * 2
        + [(hidden, intermediate)]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=1536)
    parser.add_argument("--intermediate", type=int, default=8960)
    parser.add_argument("--kv", type=int, default=256)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--rows", default="1,2,3,4,5,6,8")
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    layers = [
        Int4Linear(torch.nn.Linear(inputs, outputs, bias=False))
        for _ in range(args.layers)
        for outputs, inputs in layer_shapes(args.hidden, args.intermediate, args.kv)
    ]
    streamed = sum(layer.matrix_bytes for layer in layers)
    threads = torch.get_num_threads()
    print(f"# int4 kernel on {cpu_name()}, {threads} threads: {streamed / 1e9:.2f} GB of packed weights")
    for layer in layers:  # once untimed: the pages of every weight touched, the OpenMP threads started
        layer(torch.randn(1, layer.in_features))
    one_row = None
    for k in (int(r) for r in args.rows.split(",")):
        inputs = {n: torch.randn(k, n) for n in (args.hidden, args.intermediate)}
        best = float("inf")
        for _ in range(args.repeats):
            started = time.perf_counter()
            for layer in layers:
                layer(inputs[layer.in_features])
            best = min(best, time.perf_counter() - started)
        one_row = one_row or best
        print(f"k = {k}: {best * 1e3:7.1f} ms  {streamed / best / 1e9:5.1f} GB/s  v(k) = {best / one_row:.2f}")


if __name__ == "__main__":
    main()
