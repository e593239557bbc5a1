"""A store bounded by bytes: results kept by key, the least recently used dropped first when full."""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import numpy as np
import pandas as pd
import torch

ARRAY_HEADER_BYTES = 112  # a numpy array's object header (its sys.getsizeof counts an owned buffer too)


def approx_bytes(value: Any) -> int:
    """An estimate of the memory ``value`` holds, following containers, dataclasses and arrays.

    Shared sub-objects are counted once. Tensors, numpy arrays and data frames count their buffers.
    """
    seen: set[int] = set()
    stack, total = [value], 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            total += item.element_size() * item.nelement() + sys.getsizeof(item)
        elif isinstance(item, np.ndarray):
            total += item.nbytes + ARRAY_HEADER_BYTES
        elif isinstance(item, pd.DataFrame | pd.Series):
            total += int(np.sum(item.memory_usage(deep=True)))
        else:
            total += sys.getsizeof(item)
            if isinstance(item, dict):
                stack.extend(item.keys())
                stack.extend(item.values())
            elif isinstance(item, list | tuple | set | frozenset):
                stack.extend(item)
            elif dataclasses.is_dataclass(item) and not isinstance(item, type):
                stack.extend(getattr(item, f.name) for f in dataclasses.fields(item))
            elif hasattr(item, "__dict__") and not isinstance(item, type):
                stack.append(vars(item))
    return total


class ByteBoundedStore:
    """A least-recently-used map whose values' estimated sizes sum to at most ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.lock = max_bytes, threading.Lock()
        self.items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self.bytes = 0

    def get(self, key: Hashable) -> Any | None:
        with self.lock:
            if key not in self.items:
                return None
            self.items.move_to_end(key)
            return self.items[key][0]

    def put(self, key: Hashable, value: Any) -> bool:
        """Store ``value`` (evicting the least recently used); False when it alone exceeds the bound."""
        size = approx_bytes(value)
        with self.lock:
            if key in self.items:
                self.bytes -= self.items.pop(key)[1]
            if size > self.max_bytes:
                return False
            self.items[key], self.bytes = (value, size), self.bytes + size
            while self.bytes > self.max_bytes:
                self.bytes -= self.items.popitem(last=False)[1][1]
            return True
