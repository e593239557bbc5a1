"""The embedded default (SmolLM2-135M-Instruct from its packaged GGUF): exactness on real weights."""

import pytest
import torch

from specviz.config import DecodeConfig
from specviz.engine import ModelPair, speculative_decode
from specviz.models.embedded import embedded_model_dir
from specviz.models.loading import _load_pretrained, load_model

from .conftest import target_greedy

pytestmark = [pytest.mark.slow]  # it runs the app (or loads the embedded pair): the whole suite's lane

TRANSLATE = "Translate to English: Machen sich Hunderte Millionen von Autofahrern Sorgen über ihre Privatsphäre?"


@pytest.mark.parametrize("drafter,gamma", [("layerskip", 3), ("layerskip", 6), ("ngram", 4)])
def test_embedded_greedy_matches_target_generate(embedded, drafter, gamma):
    config = DecodeConfig(drafter=drafter, gamma=gamma, max_new_tokens=24, device="cpu")
    trace = speculative_decode(config, prompt=TRANSLATE, pair=ModelPair(embedded))
    assert trace.output_ids == target_greedy(embedded, trace.prompt_ids, 24)
    assert trace.stats.new_tokens == len(trace.output_ids) > 0


def test_layer_skip_adaptive_exit_stays_exact_and_drafts_fewer(embedded):
    base = DecodeConfig(drafter="layerskip", gamma=8, max_new_tokens=24, device="cpu")
    plain = speculative_decode(base, prompt=TRANSLATE, pair=ModelPair(embedded))
    adaptive = speculative_decode(base.replace(exit_threshold=0.6), prompt=TRANSLATE, pair=ModelPair(embedded))
    assert adaptive.output_ids == plain.output_ids
    assert adaptive.stats.drafted_tokens < plain.stats.drafted_tokens
    assert all(r.exit_threshold is not None for r in adaptive.rounds)


def test_embedded_cache_reloads_with_the_same_weights(embedded):
    weights = embedded_model_dir() / "model.safetensors"
    written = weights.stat().st_mtime_ns
    # a second process's load, without disturbing this process's shared copy: it reads the cache directory
    again, _ = _load_pretrained(str(embedded_model_dir()), torch.float32)
    assert weights.stat().st_mtime_ns == written  # the de-quantisation (~18 s) was not repeated
    assert load_model("embedded", "cpu") is embedded  # still one shared copy in this process
    for (name, a), (_, b) in zip(embedded.model.state_dict().items(), again.state_dict().items()):
        assert a.equal(b), name


def test_the_opening_example_shows_both_verdicts_and_changes_with_gamma(embedded):
    """The app opens on DEFAULT_PROMPT: its rounds must show rejections as well as acceptances, and a larger γ must
    change them (a teacher's first question), on the embedded pair, greedy, the app's 32 tokens."""
    from specviz.config import DecodeConfig
    from specviz.engine import load_pair, speculative_decode
    from specviz.ui.presets import DEFAULT_PROMPT

    config = DecodeConfig(device="cpu", max_new_tokens=32)
    pair = load_pair(config)
    stats = {g: speculative_decode(config.replace(gamma=g), prompt=DEFAULT_PROMPT, pair=pair).stats for g in (2, 3, 8)}
    assert all(0 < s.accepted_tokens < s.drafted_tokens for s in stats.values())  # both verdicts in every setting
    assert stats[2].rounds > stats[8].rounds
