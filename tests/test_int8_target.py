"""The int8 TARGET: exact to itself because its kernel computes every row of a pass as it would alone.

Speculative decoding is exact to the target as run (Leviathan et al. 2023, Thm. 3.5 for sampling; greedy by
construction) when a verification pass over k + 1 tokens gives each position the logits k + 1 one-token steps
would give. The int8 kernel sums int8 products in int32, so that holds bit for bit for its matrices; the tests
check it for the kernel, then greedy output (chain and tree, two block sizes each) and sampling at computed power
against the int8 target's own distribution."""

from __future__ import annotations

import pytest
import torch

from specviz.analysis.race import verdict
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, load_pair, speculative_decode
from specviz.models.forwards import KVCachedSequence, TreeLayout, full_forward
from specviz.models.int4 import Int4Linear
from specviz.models.int8 import Int8Embedding, Int8Linear, Int8Matrix, int8_linear, quantise_rows, weight_levels
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


def test_an_int8_model_holds_about_a_byte_a_weight_its_embedding_included(tiny_dirs, tiny_pair, int8_pairs):
    """Every matrix of an int8 target (and of an int4 draft) is quantised, its input embedding too: a lookup gives the
    row's int8 values times the row's scale, within half a step of the float32 table."""
    int4_draft = load_pair(tiny_config(tiny_dirs, dtype="float32", draft_dtype="int4")).draft
    for model, float_model in (
        (int8_pairs["float32"].target.model, tiny_pair.target.model),
        (int4_draft.model, tiny_pair.draft.model),
    ):
        float_table = float_model.get_input_embeddings().weight
        embedding = model.get_input_embeddings()
        assert isinstance(embedding, Int8Embedding) and embedding.weight.is_meta
        ids = torch.tensor([0, 5, embedding.num_embeddings - 1])
        looked_up = embedding(ids)
        assert torch.equal(looked_up, embedding.values[ids].float() * embedding.scales[ids, None])
        assert ((looked_up - float_table[ids]).abs() <= embedding.scales[ids, None] / 2 + 1e-7).all()
        kinds = (Int4Linear, Int8Linear, Int8Embedding)
        quantised = sum(m.matrix_bytes for m in model.modules() if isinstance(m, kinds))
        floats = sum(p.numel() for p in model.parameters())  # the norms and biases alone
        matrices = sum(m.weight.numel() for m in model.modules() if isinstance(m, kinds))
        assert floats < 0.02 * matrices and quantised < 0.3 * 4 * matrices  # under 30% of float32's bytes


def one_row_steps(target, context: list[int], continuation: list[int]) -> torch.Tensor:
    """Logits after each token of ``continuation``, fed one token a step after ``context``: (len, V)."""
    sequence = KVCachedSequence()
    sequence.feed(full_forward, target, context, 1)
    steps = []
    for token in continuation:
        steps.append(sequence.feed(full_forward, target, [token], 1)[0])
    return torch.stack(steps)


def test_an_int8_targets_pass_over_k_tokens_is_k_steps_bit_for_bit(int8_pairs):
    """The property exactness rests on, for the whole model (products, attention, norms): each row of a pass over
    several new tokens, a causal chain or a tree's branch, has the bits of that token's own step."""
    target = int8_pairs["float32"].target
    context, continuation = PROMPT, [7, 3, 11, 5, 9]
    steps = one_row_steps(target, context, continuation)
    chain = KVCachedSequence()
    chain.feed(full_forward, target, context, 1)
    assert torch.equal(chain.feed(full_forward, target, continuation, len(continuation)), steps)
    # a tree: two children of the context's last token (continuation[0] and 13), then continuation[1] under the first
    cached = len(context)
    allowed = torch.zeros(3, cached + 3, dtype=torch.bool)
    allowed[:, :cached] = True
    allowed[0, cached], allowed[1, cached + 1], allowed[2, [cached, cached + 2]] = True, True, True
    tree = KVCachedSequence()
    tree.feed(full_forward, target, context, 1)
    layout = TreeLayout(positions=[cached, cached, cached + 1], allowed=allowed)
    logits = tree.feed(full_forward, target, [continuation[0], 13, continuation[1]], 3, layout)
    assert torch.equal(logits[[0, 2]], steps[:2])
    assert torch.equal(logits[1], one_row_steps(target, context, [13])[0])


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
