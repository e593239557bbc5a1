"""The package's C kernels (``int4_rows.c``: the int4 product; ``row_attention.c``: attention one query row at a
time; ``int4_layer.c``: an int4 model's decoder layer in two calls), compiled once per machine with its own
instruction set into one library and loaded.

The sources are compiled by the system's C compiler for THIS CPU (``-march``, by default ``native``: AVX-512 VNNI,
AVX2 or plain C, chosen by the compiler's own macros inside the sources), with OpenMP (the runtime torch already
loaded, ``libgomp.so.1``, so the two share one pool of threads) and without contracting a multiply and an add into
one (``-ffp-contract=off``): the sources' fused multiply-adds are written out, so every instruction set computes
the same bits. The library lands in the cache, named by the sources, the flags and the CPU, so a source or a
machine that changes builds anew; a concurrent build writes beside it and renames into place. Calls through
``ctypes`` release the GIL, so other sessions' Python runs while a product does.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from specviz.cache import cache_root
from specviz.runtime.machine import cpu_flags

SOURCES = tuple(Path(__file__).with_name(name) for name in ("int4_rows.c", "row_attention.c", "int4_layer.c"))
FLAGS = ("-O3", "-fopenmp", "-ffp-contract=off", "-fPIC", "-shared")
_built: dict[str, Kernels | str] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Kernels:
    """The compiled ``int4_rows_product``, ``rows_attention`` and an int4 model's decoder layer in two halves,
    ``int4_layer_in`` and ``int4_layer_out`` (see each source's header for its arithmetic), and where they were
    built."""

    product: Callable[..., int]
    attention: Callable[..., int]
    layer_in: Callable[..., int]
    layer_out: Callable[..., int]
    library: Path
    march: str


def library_path(march: str) -> Path:
    """Where the library for these sources, these flags, ``march`` and this CPU is kept."""
    sources = tuple(source.read_text() for source in SOURCES)
    key = "|".join((*sources, " ".join(FLAGS), march, platform.machine(), " ".join(sorted(cpu_flags()))))
    return cache_root() / "kernels" / f"specviz-{hashlib.sha256(key.encode()).hexdigest()[:16]}.so"


def compile_library(march: str, target: Path) -> str | None:
    """Compile the sources for ``march`` into ``target``: None, or why it could not."""
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        return "no C compiler here (install gcc)"
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    command = [compiler, *FLAGS, f"-march={march}", *map(str, SOURCES), "-o", str(staging), "-lm"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        return f"{compiler} did not run: {exc}"
    if done.returncode != 0:
        staging.unlink(missing_ok=True)
        return f"{compiler} failed: {done.stderr.strip()[-400:]}"
    os.replace(staging, target)
    return None


def bind(library: Path, march: str) -> Kernels:
    """The library's functions with their argument types (each returns 0, or -1 out of memory): the product (x, rows,
    inputs, outputs, weight, bias or NULL, y), the attention (q, rows, heads, d, k, v, kv heads, keys, seen counts,
    seen indices or NULL, scale, out) and the int4 layer's two halves (``int4_layer.c`` names their arguments)."""
    loaded = ctypes.CDLL(str(library))
    pointer, size, real = ctypes.c_void_p, ctypes.c_int, ctypes.c_float
    product, attention = loaded.int4_rows_product, loaded.rows_attention
    layer_in, layer_out = loaded.int4_layer_in, loaded.int4_layer_out
    product.argtypes = [pointer, size, size, size, pointer, pointer, pointer]
    attention.argtypes = [pointer, size, size, size, pointer, pointer, size, size, pointer, pointer, real, pointer]
    layer_in.argtypes = [pointer, size, size, pointer, real, pointer, pointer, size, size, size, pointer, pointer]
    layer_in.argtypes += [pointer, pointer, pointer]
    layer_out.argtypes = [pointer, size, size, pointer, size, size, pointer, pointer, size, size, pointer, pointer]
    layer_out.argtypes += [real, pointer, pointer, pointer, real, pointer, pointer, size, pointer, pointer]
    for function in (product, attention, layer_in, layer_out):
        function.restype = ctypes.c_int
    return Kernels(product, attention, layer_in, layer_out, library, march)


def compiled_kernels(march: str = "native") -> Kernels | str:
    """The kernels compiled for ``march`` (built on first use, then read from the cache), or why they are not here."""
    with _lock:  # read on every attention call: after the first, a lookup, no file system
        if march not in _built:
            missing = ", ".join(source.name for source in SOURCES if not source.is_file())
            _built[march] = (
                f"the kernels' sources {missing} are not installed beside {Path(__file__).name}"
                if missing
                else built_or_why(march)
            )
        return _built[march]


def built_or_why(march: str) -> Kernels | str:
    """The library for ``march`` from the cache, else compiled now, or why it could not be."""
    target = library_path(march)
    failure = None if target.is_file() else compile_library(march, target)
    return failure or bind(target, march)
