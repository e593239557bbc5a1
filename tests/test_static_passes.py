"""Passes over a static KV cache (issue #64: what a GPU captures once as CUDA graphs and replays), run on the CPU: the
same tokens as the growing cache every CPU runs, chain and tree, in every float precision; the shapes the capture
path keeps; its fallback where no graph can be captured."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from specviz.engine import ModelPair, speculative_decode
from specviz.engine.baseline import autoregressive_decode
from specviz.models.loading import load_model
from specviz.runtime.protocol import KVCachedSequence
from specviz.runtime.reference import full_forward
from specviz.runtime.static_passes import (
    CAPACITY_STEP,
    GRAPHED,
    STATIC,
    StaticCache,
    capture,
    passes_for,
    static_passes,
)

from .test_engine import PROMPT, tiny_config

CHAIN_AND_TREE = [
    dict(gamma=2),
    dict(gamma=5),
    dict(drafter="tree", tree_mode="constant", branching=2, tree_depth=3),  # tree passes and a kept path
]


def with_passes(pair: ModelPair, passes: str) -> ModelPair:
    """The same loaded models (their weights shared, only read) running their passes as ``passes`` says."""
    assert pair.draft is not None
    return ModelPair(dataclasses.replace(pair.target, passes=passes), dataclasses.replace(pair.draft, passes=passes))


@pytest.fixture(scope="module", params=["float32", "bfloat16", "float16"])
def pair_in(request, tiny_dirs) -> ModelPair:
    return ModelPair(
        load_model(tiny_dirs["target"], "cpu", request.param), load_model(tiny_dirs["draft"], "cpu", request.param)
    )


@pytest.mark.parametrize("changes", CHAIN_AND_TREE)
def test_the_static_cache_gives_the_growing_caches_tokens(tiny_dirs, pair_in, changes):
    """Greedy speculative decoding and the target alone write the same tokens over a static cache as over the growing
    one, chain (γ 2 and 5) and tree, in float32, bfloat16 and float16; and every pass of the run went over it."""
    config = tiny_config(tiny_dirs, dtype=pair_in.target.precision, **changes)
    static = with_passes(pair_in, STATIC)
    growing = speculative_decode(config, prompt_ids=PROMPT, pair=pair_in)
    over_static = speculative_decode(config, prompt_ids=PROMPT, pair=static)
    assert over_static.output_ids == growing.output_ids
    if config.dtype == "float32":  # in half precision a masked softmax's rounding may flip a draft's argmax
        assert [r.accepted_count for r in over_static.rounds] == [r.accepted_count for r in growing.rounds]
    assert autoregressive_decode(config, static, PROMPT)[0] == autoregressive_decode(config, pair_in, PROMPT)[0]
    assert static_passes(static.target).capacity == CAPACITY_STEP  # the target's passes ran over its buffer
    assert static_passes(static.draft).capacity == CAPACITY_STEP  # type: ignore[arg-type]


def test_a_sequence_that_takes_the_buffer_back_finds_its_own_slots(tiny_pair):
    """Two sequences of one model take turns on its buffer (two sessions, or a profile beside a run): each one's slots
    are set aside while the other holds it and put back, so a sequence interrupted by another gets bit for bit the
    logits of one that ran alone, and within rounding those of the growing cache."""
    static = with_passes(tiny_pair, STATIC).target
    interrupted, other, alone, growing = (KVCachedSequence() for _ in range(4))
    interrupted.feed(full_forward, static, PROMPT, 1)
    other.feed(full_forward, static, PROMPT[::-1], 1)  # takes the buffer over
    resumed = interrupted.feed(full_forward, static, [4, 5], 2)  # takes it back
    alone.feed(full_forward, static, PROMPT, 1)
    assert isinstance(interrupted.cache, StaticCache) and torch.equal(
        resumed, alone.feed(full_forward, static, [4, 5], 2)
    )
    growing.feed(full_forward, tiny_pair.target, PROMPT, 1)
    torch.testing.assert_close(resumed, growing.feed(full_forward, tiny_pair.target, [4, 5], 2), rtol=1e-4, atol=1e-4)
    assert not isinstance(growing.cache, StaticCache)  # a CPU model's passes stay on the growing cache


def test_the_capture_path_keeps_one_entry_per_pass_shape_and_runs_eagerly_without_a_gpu(tiny_dirs, tiny_pair):
    """Graphed passes on a machine without CUDA: each pass shape the run used is kept once (T new tokens, the last
    n_last of them, the head, over the buffer's capacity): the target's one-token step and its verification widths
    up to γ + 1, the draft's steps; a sequence's first pass (its prompt's, run once) is not kept; no graph is
    captured, and the tokens are the growing cache's."""
    config = tiny_config(tiny_dirs, gamma=4)
    graphed = with_passes(tiny_pair, GRAPHED)
    assert speculative_decode(config, prompt_ids=PROMPT, pair=graphed).output_ids == (
        speculative_decode(config, prompt_ids=PROMPT, pair=tiny_pair).output_ids
    )
    target = static_passes(graphed.target).captured
    widths = {shape.width for shape in target}
    assert widths and widths <= set(range(1, config.gamma + 2))
    assert all(shape.n_last == shape.width and shape.capacity == CAPACITY_STEP for shape in target)
    assert all(entry.graph is None and entry.outputs == () for entry in target.values())  # the fallback: eager
    draft = static_passes(graphed.draft).captured  # type: ignore[arg-type]
    assert 1 in {shape.width for shape in draft}
    assert capture(lambda: (torch.zeros(1),), torch.device("cpu"), None, None) == (
        None,
        (),
    )  # no GPU here: nothing captured, nothing raised


def test_only_a_plain_llama_in_a_float_precision_on_a_gpu_takes_graphed_passes(tiny_pair, monkeypatch):
    model = tiny_pair.target.model
    assert passes_for(torch.device("cpu"), model) == "dynamic"  # every CPU keeps its passes
    assert passes_for(torch.device("cuda"), model) == GRAPHED
    monkeypatch.setenv("SPECVIZ_CUDA_GRAPHS", "0")
    assert passes_for(torch.device("cuda"), model) == STATIC


def test_a_models_static_passes_do_not_keep_it_alive(tiny_dirs):
    """What the static passes hold of a model (its buffer, its graphs) goes with it: a model the process lets go
    (``forget_loaded_models``) is not kept alive by them, and a GPU's memory comes back."""
    import gc
    import weakref

    loaded = dataclasses.replace(load_model(tiny_dirs["target"], "cpu"), passes=STATIC)
    KVCachedSequence().feed(full_forward, loaded, PROMPT, 1)
    assert static_passes(loaded).capacity == CAPACITY_STEP
    gone = weakref.ref(loaded)
    del loaded
    gc.collect()
    assert gone() is None


def test_a_runs_static_buffer_is_sized_once_before_it_starts(tiny_dirs, tiny_pair):
    """A run that outgrows one capacity step: its models' buffers are made for the whole run before its first pass
    (one growth each), not grown in the middle of it, which would drop and capture again every pass shape."""
    long_prompt = (PROMPT * 60)[: CAPACITY_STEP - 10]  # the run passes the first step's slots within its tokens
    config = tiny_config(tiny_dirs, gamma=3, max_new_tokens=24)
    graphed = with_passes(tiny_pair, GRAPHED)
    speculative_decode(config, prompt_ids=long_prompt, pair=graphed)
    for model in (graphed.target, graphed.draft):
        passes = static_passes(model)  # type: ignore[arg-type]
        assert passes.growths == 1 and passes.capacity == 2 * CAPACITY_STEP
        assert all(shape.capacity == 2 * CAPACITY_STEP for shape in passes.captured)
        assert passes.failed == 0 and passes.graphs == 0  # no GPU here: eager, and no capture counted as failed
    alone = dataclasses.replace(load_model(tiny_dirs["target"], "cpu"), passes=STATIC)
    autoregressive_decode(config, ModelPair(alone, None), long_prompt)
    assert static_passes(alone).growths == 1


def test_a_gpus_race_captures_every_pass_shape_before_its_clock():
    """On a GPU whose passes are captured as graphs, each decoder's untimed warm-up is as long as the run, so no lane
    captures a graph on the clock; elsewhere it is the first tokens only."""
    from specviz.analysis.race import WARM_UP_TOKENS, warm_up_tokens
    from specviz.config import DecodeConfig

    config = DecodeConfig(max_new_tokens=48)
    assert warm_up_tokens(config, GRAPHED) == 48
    assert warm_up_tokens(config, STATIC) == warm_up_tokens(config, "dynamic") == WARM_UP_TOKENS
