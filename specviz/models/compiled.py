"""The package's C kernel (``int4_rows.c``), compiled once per machine with its own instruction set and loaded.

The source is compiled by the system's C compiler for THIS CPU (``-march``, by default ``native``: AVX-512 VNNI,
AVX2 or plain C, chosen by the compiler's own macros inside the source), with OpenMP (the runtime torch already
loaded, ``libgomp.so.1``, so the two share one pool of threads) and without contracting a multiply and an add into
one (``-ffp-contract=off``): the source's fused multiply-adds are written out, so every instruction set computes
the same bits. The library lands in the cache, named by the source, the flags and the CPU, so a source or a
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

from specviz.models.cache import cache_root
from specviz.models.machine import cpu_flags

SOURCE = Path(__file__).with_name("int4_rows.c")
FLAGS = ("-O3", "-fopenmp", "-ffp-contract=off", "-fPIC", "-shared")
_built: dict[str, Int4Kernel | str] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class Int4Kernel:
    """The compiled ``int4_rows_product`` (see the source's header for its arithmetic) and where it was built."""

    product: Callable[..., int]
    library: Path
    march: str


def library_path(march: str) -> Path:
    """Where the library for this source, these flags, ``march`` and this CPU is kept."""
    key = "|".join((SOURCE.read_text(), " ".join(FLAGS), march, platform.machine(), " ".join(sorted(cpu_flags()))))
    return cache_root() / "kernels" / f"int4_rows-{hashlib.sha256(key.encode()).hexdigest()[:16]}.so"


def compile_library(march: str, target: Path) -> str | None:
    """Compile the source for ``march`` into ``target``: None, or why it could not."""
    compiler = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        return "no C compiler here (install gcc)"
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    command = [compiler, *FLAGS, f"-march={march}", str(SOURCE), "-o", str(staging), "-lm"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        return f"{compiler} did not run: {exc}"
    if done.returncode != 0:
        staging.unlink(missing_ok=True)
        return f"{compiler} failed: {done.stderr.strip()[-400:]}"
    os.replace(staging, target)
    return None


def bind(library: Path, march: str) -> Int4Kernel:
    """The library's product with its argument types: (x, rows, inputs, outputs, weight, bias or NULL, y) -> 0."""
    product = ctypes.CDLL(str(library)).int4_rows_product
    pointer, size = ctypes.c_void_p, ctypes.c_int
    product.argtypes = [pointer, size, size, size, pointer, pointer, pointer]
    product.restype = ctypes.c_int
    return Int4Kernel(product, library, march)


def int4_kernel(march: str = "native") -> Int4Kernel | str:
    """The kernel compiled for ``march`` (built on first use, then read from the cache), or why it is not here."""
    with _lock:
        if march not in _built and not SOURCE.is_file():
            _built[march] = f"the kernel's source {SOURCE.name} is not installed beside {Path(__file__).name}"
        if march not in _built:
            target = library_path(march)
            failure = None if target.is_file() else compile_library(march, target)
            _built[march] = failure or bind(target, march)
        return _built[march]
