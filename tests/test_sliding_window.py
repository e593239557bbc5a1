"""Sliding-window models (Mistral-style): full croppable caches, the model's own window, exact greedy output."""

from __future__ import annotations

import pytest

from specviz.config import DecodeConfig
from specviz.engine import ModelPair, speculative_decode
from specviz.models.loading import load_model
from specviz.settings import ConfigError
from tests.tiny import make_tiny_model

from .conftest import target_greedy

WINDOW = 6
PROMPT = [3, 7, 5, 9, 3, 7, 4, 8]  # longer than the window: the window changes what each layer sees


@pytest.fixture(scope="module")
def mistral_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("mistral")
    target = make_tiny_model(root / "target", seed=4, layers=4, hidden=64, sliding_window=WINDOW)
    draft = make_tiny_model(root / "draft", seed=5, layers=4, hidden=64, like=target, noise=0.3, sliding_window=WINDOW)
    return target, draft, ModelPair(load_model(target, "cpu"), load_model(draft, "cpu"))


def test_the_tiny_model_really_uses_a_window(mistral_pair):
    assert mistral_pair[2].target.model.config.sliding_window == WINDOW


@pytest.mark.parametrize("drafter,gamma", [("model", 3), ("model", 5), ("layerskip", 3), ("ngram", 4)])
def test_greedy_is_identical_to_the_targets_own_generate(mistral_pair, drafter, gamma):
    target, draft, pair = mistral_pair
    config = DecodeConfig(
        target=target,
        draft=draft,
        drafter=drafter,
        rule="greedy",
        gamma=gamma,
        max_new_tokens=24,
        skip_layers=(1,),
        device="cpu",
    )
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=pair)
    assert trace.output_ids == target_greedy(pair.target, PROMPT, len(trace.output_ids))
    assert len(trace.output_ids) > WINDOW and any(r.correction for r in trace.rounds)  # caches were cropped


def test_the_tree_drafter_is_refused_with_a_message(mistral_pair):
    target, draft, pair = mistral_pair
    config = DecodeConfig(target=target, draft=draft, drafter="tree", rule="greedy", device="cpu")
    with pytest.raises(ConfigError, match="sliding window"):
        speculative_decode(config, prompt_ids=PROMPT, pair=pair)
