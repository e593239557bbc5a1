"""The package's C kernels (``int4_rows.c``: the int4 product; ``row_attention.c``: attention one query row at a
time; ``int4_layer.c``: an int4 model's decoder layer in two calls), compiled once per machine with its own
instruction set into one library and loaded.

``kernels.h``, included by every source, declares what the library exports and the structs its longer calls take:
the product keeps its seven arguments (the hot call, some 170 a draft's step), attention takes one
``struct rows_attention_args`` and the layer's two halves one ``struct int4_layer_args``, mirrored here field for
field by :class:`RowsAttentionArgs` and :class:`Int4LayerArgs` (ctypes lays a Structure out as the C compiler does,
so the two agree exactly when their fields are the same names, types and order). A library whose structs are laid out
otherwise than its mirrors (``kernels_layout.c`` reports each field's offset and size) is refused at load:
:func:`layout_differences`. A caller's tensor reaches a call through :func:`address`, which checks its device,
dtype, shape and contiguity first: a wrong tensor raises, it never reaches memory it does not own (the product's
rows, made contiguous float32 by :func:`~specviz.runtime.cpu.int4.kernel_product` itself, are checked for their
shape there; a packed weight's address is taken once, from the buffer :mod:`specviz.runtime.cpu.int4` packed).

The sources are compiled by the system's C compiler for THIS CPU (``-march``, by default ``native``: AVX-512 VNNI,
AVX2 or plain C, chosen by the compiler's own macros inside the sources), with OpenMP (the runtime torch already
loaded, ``libgomp.so.1``, so the two share one pool of threads) and without contracting a multiply and an add into
one (``-ffp-contract=off``): the sources' fused multiply-adds are written out, so every instruction set computes
the same bits. The library lands in the cache, named by the sources, the header, the flags and the CPU, so a source
or a machine that changes builds anew; a concurrent build writes beside it and renames into place. Calls through
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
from typing import Callable, ClassVar

import torch

from specviz.cache import cache_root
from specviz.runtime.machine import cpu_flags

HERE = Path(__file__).parent
SOURCES = tuple(HERE / name for name in ("int4_rows.c", "row_attention.c", "int4_layer.c", "kernels_layout.c"))
HEADER = HERE / "kernels.h"  # included by name from beside each source: no -I
FLAGS = ("-O3", "-fopenmp", "-ffp-contract=off", "-fPIC", "-shared")
_built: dict[str, Kernels | str] = {}
_lock = threading.Lock()

Pointer, Int, Real = ctypes.c_void_p, ctypes.c_int, ctypes.c_float  # a tensor's or weight's address (None: NULL)


class KernelArgs(ctypes.Structure):
    """A mirror of one of ``kernels.h``'s structs, named there ``struct {c_name}``."""

    c_name: ClassVar[str]


class RowsAttentionArgs(KernelArgs):
    """``struct rows_attention_args``: out (rows, heads, d) = softmax(scale * q k^T) v, each row over the keys it
    sees (``row_attention.c``); shapes in ``kernels.h``."""

    c_name = "rows_attention_args"
    _fields_ = [
        ("q", Pointer),
        ("rows", Int),
        ("heads", Int),
        ("d", Int),
        ("k", Pointer),
        ("v", Pointer),
        ("kv_heads", Int),
        ("keys", Int),
        ("seen_count", Pointer),
        ("seen_index", Pointer),
        ("scale", Real),
        ("out", Pointer),
    ]


class Int4LayerArgs(KernelArgs):
    """``struct int4_layer_args``: an int4 decoder layer's two halves (``int4_layer.c``), the first block's fields
    read by ``int4_layer_in``, the rest (set once the cache holds the rows' keys) by ``int4_layer_out``; shapes in
    ``kernels.h``."""

    c_name = "int4_layer_args"
    _fields_ = [
        ("x", Pointer),
        ("rows", Int),
        ("hidden", Int),
        ("heads", Int),
        ("kv_heads", Int),
        ("d", Int),
        ("eps", Real),
        ("attention_norm", Pointer),
        ("qkv", Pointer),
        ("qkv_bias", Pointer),
        ("cos", Pointer),
        ("sin", Pointer),
        ("q", Pointer),
        ("k", Pointer),
        ("v", Pointer),
        ("keys", Pointer),
        ("values", Pointer),
        ("n_keys", Int),
        ("seen_count", Pointer),
        ("seen_index", Pointer),
        ("scale", Real),
        ("o", Pointer),
        ("o_bias", Pointer),
        ("mlp_norm", Pointer),
        ("gate_up", Pointer),
        ("gate_up_bias", Pointer),
        ("intermediate", Int),
        ("down", Pointer),
        ("down_bias", Pointer),
    ]


STRUCTS: tuple[type[KernelArgs], ...] = (RowsAttentionArgs, Int4LayerArgs)


def address(name: str, tensor: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> int:
    """The address of ``tensor``'s first element, for the argument ``name`` of a kernel that reads (or writes)
    exactly prod(``shape``) elements of ``dtype`` from there, row-major: only a contiguous CPU tensor of that dtype
    and shape passes, anything else raises a ValueError saying what it is instead."""
    if tensor.is_cpu and tensor.dtype == dtype and tensor.shape == shape and tensor.is_contiguous():
        return tensor.data_ptr()
    layout = "contiguous" if tensor.is_contiguous() else "non-contiguous"
    raise ValueError(
        f"{name}: the kernel takes a contiguous {dtype} CPU tensor of shape {tuple(shape)}, "
        f"not a {layout} {tensor.dtype} {tensor.device.type} tensor of shape {tuple(tensor.shape)}"
    )


@dataclass(frozen=True)
class Kernels:
    """The compiled ``int4_rows_product``, ``rows_attention`` and an int4 model's decoder layer in two halves,
    ``int4_layer_in`` and ``int4_layer_out`` (see each source's header for its arithmetic), and where they were
    built."""

    product: Callable[..., int]
    attention: Callable[[RowsAttentionArgs], int]
    layer_in: Callable[[Int4LayerArgs], int]
    layer_out: Callable[[Int4LayerArgs], int]
    library: Path
    march: str


def library_path(march: str) -> Path:
    """Where the library for these sources and header, these flags, ``march`` and this CPU is kept."""
    texts = tuple(path.read_text() for path in (*SOURCES, HEADER))
    key = "|".join((*texts, " ".join(FLAGS), march, platform.machine(), " ".join(sorted(cpu_flags()))))
    return cache_root() / "kernels" / f"specviz-{hashlib.sha256(key.encode()).hexdigest()[:16]}.so"


def c_compiler() -> str | None:
    """The C compiler the sources are compiled with: ``$CC``, else gcc, else cc; None where there is none."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def compile_library(march: str, target: Path) -> str | None:
    """Compile the sources for ``march`` into ``target``: None, or why it could not."""
    compiler = c_compiler()
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


Layout = tuple[int, frozenset[tuple[str, int, int]]]  # a struct's size and its fields' (name, offset, size)


def c_layout(library: ctypes.CDLL, name: str) -> Layout:
    """``struct name`` as the library was compiled (``kernels_layout.c``)."""
    size, field = library.kernels_struct_size, library.kernels_field
    size.argtypes, size.restype = [ctypes.c_char_p], ctypes.c_size_t
    field.argtypes = [ctypes.c_char_p, Int, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
    field.restype = ctypes.c_char_p
    offset, width, fields = ctypes.c_size_t(), ctypes.c_size_t(), list[tuple[str, int, int]]()
    while (named := field(name.encode(), len(fields), ctypes.byref(offset), ctypes.byref(width))) is not None:
        fields.append((named.decode(), offset.value, width.value))
    return size(name.encode()), frozenset(fields)


def mirror_layout(struct: type[KernelArgs]) -> Layout:
    """A ctypes mirror's layout, as ctypes lays it out."""
    fields = ((name, getattr(struct, name)) for name, *_ in struct._fields_)
    return ctypes.sizeof(struct), frozenset((name, field.offset, field.size) for name, field in fields)


def layout_differences(library: ctypes.CDLL, structs: tuple[type[KernelArgs], ...] = STRUCTS) -> list[str]:
    """How each mirror in ``structs`` is laid out otherwise than its C struct in ``library``: its size, and the
    (name, offset, size) of fields only one side has; [] where every struct agrees."""
    differences = []
    for struct in structs:
        (c_size, c_fields), (size, fields) = c_layout(library, struct.c_name), mirror_layout(struct)
        if (c_size, c_fields) != (size, fields):
            differences.append(
                f"struct {struct.c_name}: {c_size} bytes, fields {sorted(c_fields - fields)} in C; "
                f"{size} bytes, fields {sorted(fields - c_fields)} in {struct.__name__}"
            )
    return differences


def struct_call(function: Callable[..., int], struct: type[KernelArgs]) -> Callable[..., int]:
    """A kernel taking a pointer to ``struct``: called with the Structure itself (ctypes passes its address)."""
    function.argtypes = [ctypes.POINTER(struct)]  # type: ignore[attr-defined]
    function.restype = ctypes.c_int  # type: ignore[attr-defined]
    return function


def bind(library: Path, march: str) -> Kernels | str:
    """The library's functions with their argument types (each returns 0, or -1 out of memory): the product (x, rows,
    inputs, outputs, weight, bias or NULL, y); the attention, a :class:`RowsAttentionArgs`; the int4 layer's two
    halves, one :class:`Int4LayerArgs` (``kernels.h`` declares them all). Or why not: a library whose structs are
    laid out otherwise than their mirrors (:func:`layout_differences`) is never called."""
    loaded = ctypes.CDLL(str(library))
    differences = layout_differences(loaded)
    if differences:
        return f"the kernels' structs and their ctypes mirrors differ: {'; '.join(differences)}"
    product = loaded.int4_rows_product
    product.argtypes, product.restype = [Pointer, Int, Int, Int, Pointer, Pointer, Pointer], ctypes.c_int
    return Kernels(
        product,
        struct_call(loaded.rows_attention, RowsAttentionArgs),
        struct_call(loaded.int4_layer_in, Int4LayerArgs),
        struct_call(loaded.int4_layer_out, Int4LayerArgs),
        library,
        march,
    )


def compiled_kernels(march: str = "native") -> Kernels | str:
    """The kernels compiled for ``march`` (built on first use, then read from the cache), or why they are not here."""
    with _lock:  # read on every attention call: after the first, a lookup, no file system
        if march not in _built:
            missing = ", ".join(path.name for path in (*SOURCES, HEADER) if not path.is_file())
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
