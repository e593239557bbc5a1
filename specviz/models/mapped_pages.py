"""Memory a weight read from a memory-mapped file holds after it was copied elsewhere (packed, quantised).

transformers maps a safetensors file into memory: a loaded weight is a view of the file's pages, which become
resident as they are read. A weight packed into oneDNN's layout or quantised to int8 is never read again, but its
pages stay resident (and counted) while the mapping lives, so a packed model would hold its weights twice until the
last view of the file is gone. :func:`release_file_pages` gives such a weight's pages back at once (``madvise(2)``'s
MADV_DONTNEED on the whole pages inside it): for a private file mapping the pages are dropped, and a later read
would fault the file's bytes back in. Only file mappings are touched, never anonymous memory; Linux only (a no-op
elsewhere).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import mmap
import sys
from collections.abc import Callable

import torch
from torch import nn

MADV_DONTNEED = 4  # <sys/mman.h> on Linux


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    return ctypes.CDLL(name, use_errno=True) if name else None


def _file_mapping_of(address: int) -> tuple[int, int] | None:
    """The (start, end) of the mapping holding ``address`` when it maps a file (a path, not [heap] or [anon]),
    else None."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return (start, end) if len(fields) == 6 and fields[5].strip().startswith("/") else None
    return None


def release_file_pages(tensor: torch.Tensor) -> int:
    """Drop the resident pages of a CPU ``tensor`` that views a file mapping and will not be read again here (its
    values live on elsewhere: packed, quantised); the bytes released (0 where it is not file-backed)."""
    libc = _libc()
    if libc is None or tensor.device.type != "cpu" or not tensor.numel() or not tensor.is_contiguous():
        return 0
    first = tensor.data_ptr()
    mapping = _file_mapping_of(first)
    if mapping is None:
        return 0
    page = mmap.PAGESIZE
    start = -(-first // page) * page  # whole pages inside the tensor only: a neighbour's bytes are never dropped
    end = min((first + tensor.numel() * tensor.element_size()) // page * page, mapping[1])
    if end <= start or libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_DONTNEED) != 0:
        return 0
    return end - start


def replace_linear_layers(model: nn.Module, converted: Callable[[nn.Linear, bool], nn.Module]) -> int:
    """Replace every plain Linear layer of ``model`` by ``converted(layer, shared)`` (packed, quantised), in place;
    ``shared``: another module (a tied input embedding) still reads the layer's weight. The weight's file pages are
    given back unless shared, for the converted copy is the one read from now on. Returns how many changed."""
    held = {id(p) for m in model.modules() if not isinstance(m, nn.Linear) for p in m.parameters(recurse=False)}
    changed = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                shared = id(child.weight) in held
                setattr(parent, name, converted(child, shared))
                if not shared:
                    release_file_pages(child.weight)
                changed += 1
    return changed


def own_remaining_weights(model: nn.Module) -> None:
    """Copy the parameters and buffers a packed or int8 model still holds (embedding, norms, biases) into the
    process's own memory. transformers maps a safetensors file into memory and every tensor it loads is a view of
    that mapping: while one view lives, the pages packing read stay resident beside their packed copies. With the
    views gone the mapping closes, so a packed model costs one copy of each weight."""
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            tensor.data = tensor.data.clone()
