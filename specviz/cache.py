"""The cache directory where models made on this machine are kept, and how a model directory is made there.

``$SPECVIZ_CACHE`` (default ``~/.cache/specviz``) holds the de-quantised models (the embedded GGUF, the
fetched published pair), the materialised embedded draft, teacher text and corpora. A directory there is
written once, into a staging directory renamed into place, so a concurrent loader sees all of it or none.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def cache_root() -> Path:
    return Path(os.environ.get("SPECVIZ_CACHE") or Path.home() / ".cache" / "specviz")


def write_json_atomically(path: Path, data: Any) -> None:
    """``data`` as JSON at ``path``, written beside it and renamed into place: a concurrent reader (another process
    of the same machine) reads all of it or finds no file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(f".{os.getpid()}.tmp")
    staging.write_text(json.dumps(data, indent=1), encoding="utf-8")
    os.replace(staging, path)


def materialise(target: Path, write: Callable[[Path], None]) -> Path:
    """``target`` as a finished directory: made once by ``write(staging_dir)``, then renamed into place
    atomically, so a concurrent loader sees all of it or none of it."""
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".staging-"))
    try:
        write(staging)
        os.replace(staging, target)
    except OSError:
        if not (target / "model.safetensors").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def write_dequantised(gguf: Path, directory: Path) -> None:
    """De-quantise a GGUF file with transformers' reader (``gguf_file=``: the file is parsed as data) and write
    it to ``directory`` as float32 safetensors with its config, generation config and tokenizer, a directory
    that reloads in seconds with the same logits. (``save_pretrained`` refuses a GGUF-loaded model; the state
    dict written by ``safetensors``' ``save_model``, which handles tied weights, is the same checkpoint.)"""
    from safetensors.torch import save_model

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config  # the weights written are plain floats
    save_model(model, str(directory / "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(directory)
    model.generation_config.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
