"""Shared fixtures: tiny real models built from configs (no downloads) and the embedded default.

Tiny models are written with ``save_pretrained`` (safetensors) and loaded back through the same
``load_model`` path a hub id or a user's directory takes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from specviz.engine import ModelPair
from specviz.models.loading import load_model
from tests.tiny import make_tiny_pair


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory) -> dict[str, str]:
    return make_tiny_pair(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def tiny_pair(tiny_dirs) -> ModelPair:
    return ModelPair(load_model(tiny_dirs["target"], "cpu"), load_model(tiny_dirs["draft"], "cpu"))


TINY_TEXT_PROMPT = "w3 w7 w5 w9 w3 w7"  # the tiny tokenizer's words


@pytest.fixture
def tiny_params(tiny_dirs) -> dict[str, str]:
    """URL query parameters that open the app on the tiny pair."""
    return {
        "target": tiny_dirs["target"],
        "draft": tiny_dirs["draft"],
        "drafter": "model",
        "prompt": TINY_TEXT_PROMPT,
        "max_new_tokens": "12",
        "gamma": "3",
    }


@pytest.fixture(scope="session")
def embedded():
    os.environ.setdefault("SPECVIZ_CACHE", str(Path.home() / ".cache" / "specviz"))
    return load_model("embedded", "cpu")


@pytest.fixture(scope="session")
def measured_machine(embedded):
    """This machine's defaults for the embedded pair, measured (or read from the cache) before an app runs, as on a
    server that has run once: a fresh server measures them in the background, and the pages' defaults move when they
    are done (tests/test_app.py's make_app and the servers of the browser tests ask for this first)."""
    from specviz.serving.pairs import MACHINE_DEFAULTS

    return {device: MACHINE_DEFAULTS.get(device) for device in ("cpu", "auto")}


def target_greedy(loaded, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """The target's own greedy decoding through transformers' generate."""
    ids = torch.tensor([prompt_ids])
    with torch.inference_mode():
        out = loaded.model.generate(
            ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new_tokens
        )
    return out[0, len(prompt_ids) :].tolist()
