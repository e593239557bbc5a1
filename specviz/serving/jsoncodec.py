"""Results as JSON, for a store shared between processes: tagged values, never pickle.

A shared result crosses process (and machine) boundaries, so it is written as data and read back as data:
primitives as they are; lists, tuples and string-keyed dicts tagged with their kind; a :class:`Trace` and a
:class:`DecodeConfig` as their own dict forms (``to_dict``); a pandas DataFrame in pandas' "table" JSON (index and
dtypes kept); any other dataclass defined in specviz by its fields. Decoding builds only those kinds (a dataclass
only when its class lives in the specviz package), so a value read from the store can construct nothing else.
Anything else raises :class:`TypeError`: such a result stays in its own process.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
from typing import Any

import numpy as np
import pandas as pd

from specviz.config import DecodeConfig
from specviz.engine.trace import Trace

PACKAGE = "specviz."


def encode(value: Any) -> Any:
    """A JSON-able form of ``value`` that :func:`decode` turns back into an equal value."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float, np.integer, np.floating)):
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, (list, tuple)):
        return {"kind": type(value).__name__, "items": [encode(v) for v in value]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"kind": "dict", "items": {k: encode(v) for k, v in value.items()}}
    if isinstance(value, Trace):
        return {"kind": "trace", "data": value.to_dict()}
    if isinstance(value, DecodeConfig):
        return {"kind": "config", "data": value.to_dict()}
    if isinstance(value, pd.DataFrame):
        return {"kind": "frame", "json": value.to_json(orient="table")}
    if dataclasses.is_dataclass(value) and type(value).__module__.startswith(PACKAGE):
        cls = type(value)
        return {
            "kind": "dataclass",
            "class": f"{cls.__module__}:{cls.__qualname__}",
            "fields": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init},
        }
    raise TypeError(f"{type(value).__name__} has no JSON form here")


def decode(data: Any) -> Any:
    """The value :func:`encode` wrote."""
    if not isinstance(data, dict):
        return data
    kind = data["kind"]
    if kind in ("list", "tuple"):
        items = [decode(v) for v in data["items"]]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {k: decode(v) for k, v in data["items"].items()}
    if kind == "trace":
        return Trace.from_dict(data["data"])
    if kind == "config":
        return DecodeConfig.from_dict(data["data"])
    if kind == "frame":
        return pd.read_json(io.StringIO(data["json"]), orient="table")
    if kind == "dataclass":
        module, _, name = data["class"].partition(":")
        if not module.startswith(PACKAGE):
            raise ValueError(f"refusing to build {data['class']}: not a specviz class")
        cls = getattr(importlib.import_module(module), name)
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise ValueError(f"refusing to build {data['class']}: not a dataclass")
        return cls(**{k: decode(v) for k, v in data["fields"].items()})
    raise ValueError(f"unknown kind {kind!r}")


def dumps(value: Any) -> str:
    return json.dumps(encode(value), ensure_ascii=False)


def loads(text: str | bytes) -> Any:
    return decode(json.loads(text))
