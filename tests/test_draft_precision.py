"""The draft's precision apart from the target's (float32, bfloat16, int8), and one copy of each packed weight.

The target decides every token, so a draft in any precision leaves greedy output token-identical to the float32
target's own greedy, and speculative sampling exact (the rule uses the q the token was drawn from)."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors import safe_open
from torch import nn

from specviz.analysis.lab import chi_square_power, goodness_of_fit, output_law
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, load_pair, speculative_decode
from specviz.models.loading import _load_pretrained
from specviz.models.profile import weight_bytes
from specviz.rules.distributions import softmax32
from specviz.rules.sampling import BrokenResidualRule
from specviz.runtime.cpu.int4 import Int4Linear
from specviz.runtime.cpu.int8 import Int8Linear
from specviz.runtime.cpu.kernel_paths import INT4, INT8, ONEDNN, PackedLinear, kernels_of, use_kernels
from specviz.runtime.llama_step import llama_weights
from specviz.runtime.loaded import LoadedModel
from specviz.serving.urlstate import parse_query, to_query
from specviz.settings import ConfigError

from .conftest import target_greedy
from .test_engine import PROMPT, tiny_config


@pytest.fixture(scope="module")
def drafts(tiny_dirs) -> dict[str, ModelPair]:
    """The tiny pair with its draft in each precision, the target in float32 (one shared target)."""
    return {dtype: load_pair(tiny_config(tiny_dirs, draft_dtype=dtype)) for dtype in ("bfloat16", "int8", "int4")}


def test_a_draft_loads_in_its_own_precision_beside_a_float32_target(drafts):
    for dtype, pair in drafts.items():
        assert pair.target.precision == "float32" and pair.target.model.dtype == torch.float32
        assert pair.draft.precision == dtype
    int8 = drafts["int8"].draft.model
    assert kernels_of(int8) == INT8 and not any(type(m) is nn.Linear for m in int8.modules())
    assert llama_weights(int8).layers[0].q.int8 is not None  # the draft's direct Llama step multiplies in int8 too
    assert drafts["bfloat16"].draft.model.dtype == torch.bfloat16
    assert drafts["bfloat16"].target is drafts["int8"].target  # the target is loaded once
    int4 = drafts["int4"].draft.model
    assert kernels_of(int4) == INT4 and isinstance(int4.get_output_embeddings(), Int8Linear)  # int4 body, int8 head
    assert sum(isinstance(m, Int4Linear) for m in int4.modules()) == 7 * int4.config.num_hidden_layers
    assert llama_weights(int4).layers[0].q.int4 is not None  # the direct Llama step multiplies in int4 too


def test_an_int8_draft_is_close_to_its_float32_self_but_not_equal(tiny_dirs, tiny_pair, drafts):
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        exact = tiny_pair.draft.model(ids).logits
        coarse = drafts["int8"].draft.model(ids).logits
    error = (coarse - exact).abs().max() / exact.abs().max()
    assert 0 < error < 0.1  # 8-bit weights and activations: about a percent off, never the same numbers


@pytest.mark.parametrize("dtype", ["bfloat16", "int8", "int4"])
@pytest.mark.parametrize("gamma", [2, 5])
def test_greedy_with_a_cheaper_draft_is_the_float32_targets_own_greedy(tiny_dirs, drafts, dtype, gamma):
    pair = drafts[dtype]
    trace = speculative_decode(tiny_config(tiny_dirs, gamma=gamma, draft_dtype=dtype), prompt_ids=PROMPT, pair=pair)
    assert trace.output_ids == target_greedy(pair.target, PROMPT, 24)
    assert {p.status for r in trace.rounds for p in r.draft} >= {"accepted", "rejected"}
    assert trace.config.draft_dtype == dtype  # the trace records the draft's precision


@pytest.mark.parametrize("dtype", ["bfloat16", "int8", "int4"])
@pytest.mark.parametrize("depth", [2, 4])
def test_greedy_trees_with_a_cheaper_draft_are_the_targets_own_greedy(tiny_dirs, drafts, dtype, depth):
    config = tiny_config(
        tiny_dirs, drafter="tree", tree_mode="constant", branching=2, tree_depth=depth, draft_dtype=dtype
    )
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=drafts[dtype])
    assert trace.output_ids == target_greedy(drafts[dtype].target, PROMPT, 24)
    assert any(r.tree.path for r in trace.rounds)


def assert_sampling_is_lossless(pair: ModelPair, config: DecodeConfig, samples: int = 800) -> None:
    """Speculative sampling's first token against the target's p at computed power: the pair differs enough that
    rejections happen, ``samples`` tell the broken rule's law from p (power > 0.999), and the sample fits p, not it."""
    with torch.inference_mode():
        p = softmax32(pair.target.model(torch.tensor([PROMPT])).logits[0, -1])
        q = softmax32(pair.draft.model(torch.tensor([PROMPT])).logits[0, -1])
    broken = output_law(BrokenResidualRule(), p, q)
    assert float(torch.minimum(p, q).sum()) < 0.9  # the pair really differs, so rejections happen
    assert chi_square_power(p, broken, samples, level=1e-3) > 0.999  # this n tells the broken rule from the right one
    runs = (speculative_decode(config.replace(seed=s), prompt_ids=PROMPT, pair=pair) for s in range(samples))
    tokens = [trace.output_ids[0] for trace in runs]
    assert goodness_of_fit(tokens, p) > 1e-3
    assert goodness_of_fit(tokens, broken) < 1e-3


@pytest.mark.slow  # a statistical test at its computed power: many samples
def test_speculative_sampling_with_an_int8_draft_is_lossless(tiny_dirs, drafts):
    config = tiny_config(tiny_dirs, rule="sample", gamma=3, max_new_tokens=2, draft_dtype="int8")
    assert_sampling_is_lossless(drafts["int8"], config)


@pytest.mark.slow  # a statistical test at its computed power: many samples
def test_speculative_sampling_with_a_confidence_exit_is_lossless(tiny_dirs, tiny_pair):
    """The draft stops at its first token with max q below 0.3 (the stop reads only the draft's q): the first token
    still follows the target's p."""
    config = tiny_config(tiny_dirs, rule="sample", gamma=3, max_new_tokens=2, confidence_exit=0.3)
    assert_sampling_is_lossless(tiny_pair, config)


def test_a_draft_precision_in_a_link_round_trips_and_a_bad_one_falls_back():
    defaults = DecodeConfig()
    config = defaults.replace(draft_dtype="int8")
    state = parse_query(to_query(config, "hello", 2, defaults), defaults)
    assert state.config.draft_dtype == "int8" and state.config.draft_precision == "int8" and not state.messages
    bad = parse_query({"draft_dtype": "int3"}, defaults)
    assert bad.config.draft_dtype is None and any("draft_dtype" in m for m in bad.messages)
    with pytest.raises(ConfigError, match="draft_dtype must be one of float32, bfloat16, int8"):
        DecodeConfig(draft_dtype="float64").validated()
    assert DecodeConfig(dtype="bfloat16").draft_precision == "bfloat16"  # unset: the target's


def test_the_cli_takes_a_draft_precision_and_records_it(tiny_dirs, tmp_path):
    """The command line in this process (``python -m specviz`` itself runs in test_package and test_player): its
    models are the ones loaded here, measured once, not loaded and measured again by a process of their own."""
    from specviz.cli import main

    out = tmp_path / "trace.json"
    args = ["--target", tiny_dirs["target"], "--draft", tiny_dirs["draft"], "--drafter", "model", "--rule", "greedy"]
    args += ["--prompt-ids", ",".join(map(str, PROMPT)), "--draft-dtype", "int8", "--device", "cpu", "--out", str(out)]
    assert main(["trace", *args]) == 0
    assert json.loads(out.read_text())["config"]["draft_dtype"] == "int8"


def test_packing_keeps_one_copy_of_each_weight_and_a_tied_one_shared(tiny_dirs):
    model, tokenizer = _load_pretrained(tiny_dirs["target"], torch.float32)  # a copy of its own, not the shared one
    loaded = LoadedModel(spec="copy", name="copy", model=model, tokenizer=tokenizer, device=torch.device("cpu"))
    use_kernels(model, ONEDNN)
    packed = [m for m in model.modules() if isinstance(m, PackedLinear)]
    assert packed and all(m.shared is None for m in packed)  # untied: the packed copy is the only one
    assert not any(isinstance(p, nn.Parameter) and p.ndim == 2 for m in packed for p in m.parameters())
    with safe_open(os.path.join(tiny_dirs["target"], "model.safetensors"), "pt") as stored:
        for name in stored.keys():  # every weight reads back exactly, from its packed copy where packed
            module, _, attribute = name.rpartition(".")
            assert getattr(model.get_submodule(module), attribute).equal(stored.get_tensor(name)), name
        stored_bytes = sum(stored.get_tensor(k).numel() * 4 for k in stored.keys() if "embed_tokens" not in k)
    assert weight_bytes(loaded) == stored_bytes  # what a step streams, counted from the packed copies too
    tied = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10))
    tied[1].weight = tied[0].weight
    use_kernels(tied, ONEDNN)
    assert tied[1].shared is tied[0].weight  # a tied head keeps the embedding's weight: the embedding reads it
    assert list(tied.state_dict()) == ["0.weight", "1.weight", "1.bias"]


def test_an_int8_layer_counts_a_byte_per_weight_and_a_float_per_row():
    layer = Int8Linear(nn.Linear(64, 32))
    assert layer.matrix_bytes == 64 * 32 + 4 * 32 and layer.weight.shape == (32, 64) and layer.weight.is_meta
