"""The int8 TARGET: exact to itself because its kernel computes every row of a pass as it would alone.

Speculative decoding is exact to the target as run (Leviathan et al. 2023, Thm. 3.5 for sampling; greedy by
construction) when a verification pass over k + 1 tokens gives each position the logits k + 1 one-token steps
would give. The int8 kernel sums int8 products in int32, so that holds bit for bit for its matrices; the tests
check it for the kernel, then greedy output (chain and tree, two block sizes each) and sampling at computed power
against the int8 target's own distribution."""

from __future__ import annotations

import pytest
import torch

from specviz.analysis.race_verdicts import verdict
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, load_pair, speculative_decode
from specviz.models.int8 import Int8Matrix, int8_linear, quantise_rows, weight_levels
from specviz.models.kernels import INT8, kernels_of
from specviz.models.machine import cpu_flags
from specviz.serving.urlstate import parse_query, to_query

from .conftest import target_greedy
from .test_draft_precision import assert_sampling_is_lossless
from .test_engine import PROMPT, tiny_config


@pytest.mark.parametrize("in_features,out_features", [(64, 32), (896, 4864), (1536, 256), (100, 7)])
def test_a_pass_over_k_rows_is_k_one_row_passes_bit_for_bit(in_features, out_features):
    generator = torch.Generator().manual_seed(in_features)
    weight = torch.randn(out_features, in_features, generator=generator) * 0.05
    matrix = Int8Matrix.quantise(weight, torch.randn(out_features, generator=generator))
    rows = torch.randn(9, in_features, generator=generator) * torch.logspace(-2, 2, 9)[:, None]  # unlike scales
    together = int8_linear(rows, matrix)
    for k in (2, 5, 9):
        alone = torch.cat([int8_linear(rows[i : i + 1], matrix) for i in range(k)])
        assert torch.equal(int8_linear(rows[:k], matrix), alone)  # bit for bit, not allclose
    assert torch.equal(together[:5], int8_linear(rows[:5], matrix))
    exact = rows @ weight.T + matrix.bias
    error = ((together - exact).abs().amax(dim=1) / exact.abs().amax(dim=1)).max()
    assert 0 < error < 0.05  # 8 bits for weights and activations: close to the float product, never equal


def test_the_kernel_is_the_integer_product_exactly():
    """Against int64 arithmetic: no sum saturates or rounds (the kernel's claim of exactness, on this CPU)."""
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(512, 1536, generator=generator)
    weight[:, 0] *= 50  # an outlier column: every row's scale set by one weight, the rest small
    matrix = Int8Matrix.quantise(weight)
    x = torch.randn(6, 1536, generator=generator)
    x[:, :8] = torch.sign(x[:, :8]) * 100  # saturating-looking activations: many at +-127
    rows, scales = quantise_rows(x)
    exact = (rows.long() @ matrix.values.long().T).double()  # int64: nothing can overflow
    expected = (exact.float() * matrix.scales) * scales
    assert torch.equal(int8_linear(x, matrix), expected)
    assert matrix.values.abs().max() == weight_levels(cpu_flags())  # each row's largest weight takes the top level


def test_weights_keep_seven_bits_where_the_cpu_adds_products_in_sixteen():
    assert weight_levels(frozenset({"avx2", "avx512f", "avx512_vnni"})) == 127
    assert weight_levels(frozenset({"avx2", "amx_int8"})) == 127
    assert weight_levels(frozenset({"avx2", "avx512f"})) == 63 and 255 * 63 * 2 < 2**15 < 255 * 127 * 2


@pytest.fixture(scope="module")
def int8_pairs(tiny_dirs) -> dict[str, ModelPair]:
    """The tiny pair with an int8 target, its draft in float32 and in int8 (one shared target)."""
    return {d: load_pair(tiny_config(tiny_dirs, dtype="int8", draft_dtype=d)) for d in ("float32", "int8")}


def test_an_int8_target_loads_on_the_int8_kernel(int8_pairs):
    pair = int8_pairs["float32"]
    assert pair.target.precision == "int8" and kernels_of(pair.target.model) == INT8
    assert pair.draft.precision == "float32" and kernels_of(pair.draft.model) != INT8
    assert int8_pairs["int8"].target is pair.target  # loaded once


@pytest.mark.parametrize("draft_dtype", ["float32", "int8"])
@pytest.mark.parametrize("gamma", [2, 5])
def test_greedy_is_the_int8_targets_own_greedy(tiny_dirs, int8_pairs, draft_dtype, gamma):
    pair = int8_pairs[draft_dtype]
    config = tiny_config(tiny_dirs, dtype="int8", draft_dtype=draft_dtype, gamma=gamma)
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=pair)
    assert trace.output_ids == target_greedy(pair.target, PROMPT, 24)
    assert {p.status for r in trace.rounds for p in r.draft} >= {"accepted", "rejected"}


@pytest.mark.parametrize("depth", [2, 4])
def test_greedy_trees_are_the_int8_targets_own_greedy(tiny_dirs, int8_pairs, depth):
    config = tiny_config(
        tiny_dirs,
        dtype="int8",
        draft_dtype="float32",
        drafter="tree",
        tree_mode="constant",
        branching=2,
        tree_depth=depth,
    )
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=int8_pairs["float32"])
    assert trace.output_ids == target_greedy(int8_pairs["float32"].target, PROMPT, 24)
    assert any(r.tree.path for r in trace.rounds)


def test_the_int8_target_is_not_the_float32_one(tiny_dirs, tiny_pair, int8_pairs):
    """What "exact" means here: to the int8 target as run, a coarser model than the float32 one."""
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        exact = tiny_pair.target.model(ids).logits
        coarse = int8_pairs["float32"].target.model(ids).logits
    assert 0 < ((coarse - exact).abs().max() / exact.abs().max()) < 0.1


@pytest.mark.slow  # a statistical test at its computed power: many samples
def test_speculative_sampling_with_an_int8_target_is_lossless_against_its_distribution(tiny_dirs, int8_pairs):
    config = tiny_config(tiny_dirs, rule="sample", gamma=3, max_new_tokens=2, dtype="int8", draft_dtype="float32")
    assert_sampling_is_lossless(int8_pairs["float32"], config)


def test_the_int8_precision_round_trips_in_a_link():
    defaults = DecodeConfig()
    state = parse_query(to_query(defaults.replace(dtype="int8"), "hello", 2, defaults), defaults)
    assert state.config.dtype == "int8" and state.config.draft_precision == "int8" and not state.messages
    bad = parse_query({"dtype": "int3"}, defaults)
    assert bad.config.dtype == defaults.dtype and any("dtype" in m for m in bad.messages)


def test_a_race_verdict_names_the_int8_target_as_the_one_that_decided():
    config = DecodeConfig(dtype="int8", rule="greedy")
    assert "int8 target as run" in verdict(config, (1, 2, 3), (1, 2, 3))
    assert verdict(config, (1, 2, 3), (1, 2, 4)).startswith("2 of 3 tokens identical: greedy int8 should match")
    assert "up to rounding" in verdict(config.replace(dtype="bfloat16"), (1, 2, 3), (1, 2, 4))
