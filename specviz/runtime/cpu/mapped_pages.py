"""Memory-mapped weights: the pages a weight holds after it was copied elsewhere (packed, quantised), and tables
kept on a mapped file so that only the rows read are resident.

transformers maps a safetensors file into memory: a loaded weight is a view of the file's pages, which become
resident as they are read. A weight packed into oneDNN's layout or quantised to int8 is never read again, but its
pages stay resident (and counted) while the mapping lives, so a packed model would hold its weights twice until the
last view of the file is gone. :func:`release_file_pages` gives such a weight's pages back at once (``madvise(2)``'s
MADV_DONTNEED on the whole pages inside it): for a private file mapping the pages are dropped, and a later read
would fault the file's bytes back in. Only file mappings are touched, never anonymous memory; Linux only (a no-op
elsewhere). :func:`file_backed` goes the other way for a table read a few rows at a time (an input embedding): its
values move to a file of the cache, mapped, and a lookup faults in only the pages of the rows it reads.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import mmap
import os
import sys
from collections.abc import Callable
from pathlib import Path

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


def file_backed(table: torch.Tensor, folder: Path) -> torch.Tensor:
    """A CPU ``table`` read a few rows at a time (an input embedding) as the same values on a file of ``folder``,
    mapped privately: only the pages a lookup reads become resident, so a 151,936-row vocabulary costs the rows
    its text uses, not the whole table (the way llama.cpp maps its weights). The file is named by the table's
    content, written once and renamed into place, so processes and loads of the same weights share it (and the
    page cache); where it cannot be written the table stays in memory as it was."""
    values = table.contiguous().numpy()
    path = folder / f"{hashlib.blake2b(values.data, digest_size=16).hexdigest()}.{values.dtype}"
    try:
        if not path.is_file() or path.stat().st_size != values.nbytes:
            folder.mkdir(parents=True, exist_ok=True)
            staging = path.with_suffix(f".{os.getpid()}.tmp")
            staging.write_bytes(values.data)
            os.replace(staging, path)
        mapped = torch.from_file(str(path), shared=False, size=table.numel(), dtype=table.dtype)
    except (OSError, RuntimeError):  # a cache that cannot be written, a file that cannot be mapped
        return table
    return mapped.view(table.shape)


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
