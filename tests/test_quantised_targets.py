"""The int8 and int4 TARGETS: exact to themselves because their kernels compute every row of a pass as it would alone.

Speculative decoding is exact to the target as run (Leviathan et al. 2023, Thm. 3.5 for sampling; greedy by
construction) when a verification pass over k + 1 tokens gives each position the logits k + 1 one-token steps
would give. The int8 kernel sums int8 products in int32, and the int4 kernel sums its 4-bit products in int32 and
takes each row's float steps in one order, so that holds bit for bit for their matrices; the tests check it for the
kernels (the int4 one on every instruction set it compiles for), then for whole models, greedy output (chain and
tree, two block sizes each) and sampling at computed power against each target's own distribution."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, DynamicCache

from specviz.analysis.race import agreement
from specviz.config import DecodeConfig
from specviz.engine import ModelPair, load_pair, speculative_decode
from specviz.runtime.cpu import int8
from specviz.runtime.cpu.compiled import Kernels, compiled_kernels
from specviz.runtime.cpu.int4 import (
    Int4Linear,
    dequantised,
    int4_product,
    joint_of,
    pack_groups,
    quantise_groups,
    share_one_buffer,
)
from specviz.runtime.cpu.int4_layers import Int4DecoderLayer, quantize_int4_model
from specviz.runtime.cpu.int8 import (
    INT8_MAX,
    Int8Embedding,
    Int8Linear,
    Int8Matrix,
    int8_linear,
    quantise_rows,
    quantize_int8,
    weight_levels,
)
from specviz.runtime.cpu.kernel_paths import INT4, INT8, kernels_of
from specviz.runtime.cpu.row_attention import kernel_rows_attended, keys_seen
from specviz.runtime.llama_step import llama_weights
from specviz.runtime.machine import cpu_flags
from specviz.runtime.protocol import KVCachedSequence, TreeLayout
from specviz.runtime.reference import direct_body_weights, full_forward, model_body
from specviz.serving.urlstate import parse_query, to_query

from .conftest import target_greedy
from .test_draft_precision import assert_sampling_is_lossless
from .test_engine import PROMPT, tiny_config
from .test_kernels import reference_attention
from .tiny import make_tiny_model


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


@pytest.mark.parametrize("quantise", [quantize_int8, quantize_int4_model], ids=["int8", "int4"])
def test_a_model_quantised_as_it_is_read_has_the_bits_of_its_whole_weights_quantised(tmp_path, monkeypatch, quantise):
    """House v5: each int8 weight is quantised a block of rows at a time as its file is read
    (:func:`~specviz.runtime.cpu.int8.quantise_rows_as_read`). Blocks of 5 rows (the tiny Qwen2's 32-row head and
    embedding in 7 blocks, the last one short) give every matrix, the int4 layers' groups too, the bits that quantising
    each float32 weight of the checkpoint whole gives."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(int8, "ROWS_AT_ONCE", 5)
    directory = make_tiny_model(tmp_path / "qwen2", seed=4, layers=2, hidden=64, qwen2=True)
    checkpoint = load_file(f"{directory}/model.safetensors")
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)  # its weights: views of the file
    quantise(model)
    levels = weight_levels(cpu_flags())
    compared = 0
    for name, module in model.named_modules():
        weight = checkpoint.get(f"{name}.weight")
        if isinstance(module, Int8Linear):
            values, scales = quantise_rows(weight, levels)
            assert torch.equal(module.matrix.values, values) and torch.equal(module.matrix.scales, scales.reshape(-1))
        elif isinstance(module, Int8Embedding):
            values, scales = quantise_rows(weight)
            assert torch.equal(module.values, values) and torch.equal(module.scales, scales.reshape(-1))
        elif isinstance(module, Int4Linear):
            assert torch.equal(module.packed, pack_groups(*quantise_groups(weight)))
        else:
            continue
        compared += 1
    assert compared == 2 * 7 + 2  # every Linear of both decoder layers, the head and the embedding


def test_weights_keep_seven_bits_where_the_cpu_adds_products_in_sixteen():
    assert weight_levels(frozenset({"avx2", "avx512f", "avx512_vnni"})) == 127
    assert weight_levels(frozenset({"avx2", "amx_int8"})) == 127
    assert weight_levels(frozenset({"avx2", "avx512f"})) == 63 and 255 * 63 * 2 < 2**15 < 255 * 127 * 2


def int4_layer(in_features: int, out_features: int, seed: int) -> Int4Linear:
    generator = torch.Generator().manual_seed(seed)
    linear = torch.nn.Linear(in_features, out_features)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(out_features, in_features, generator=generator) * 0.05)
        linear.weight[:, 0] *= 20  # an outlier input: its groups' scales set by one weight
        linear.bias.copy_(torch.randn(out_features, generator=generator))
    return Int4Linear(linear)


def unlike_rows(count: int, in_features: int) -> torch.Tensor:
    rows = torch.randn(count, in_features, generator=torch.Generator().manual_seed(count)) * 2
    return rows * torch.logspace(-2, 2, count)[:, None]  # rows of unlike scales


@pytest.mark.parametrize("in_features,out_features", [(64, 32), (896, 4864), (1536, 256), (8960, 16)])
def test_an_int4_pass_over_k_rows_is_k_one_row_passes_bit_for_bit(in_features, out_features):
    layer = int4_layer(in_features, out_features, in_features)
    rows = unlike_rows(17, in_features)  # AVX-512 takes up to 8 rows at once: 9 and 17 rows go in even blocks
    together = layer(rows)
    for k in (2, 5, 7, 9, 17):
        assert torch.equal(layer(rows[:k]), torch.cat([layer(rows[i : i + 1]) for i in range(k)]))
    assert torch.equal(together[:5], layer(rows[:5]))


def instruction_sets() -> list[str]:
    """The ``-march`` values the int4 kernel is compiled for here: plain x86-64 (its C loops), Haswell (AVX2) where
    the CPU runs it, and this CPU's own (AVX-512 VNNI where it has it)."""
    flags = cpu_flags()
    return ["x86-64"] + (["haswell"] if {"avx2", "fma", "f16c"} <= flags else []) + ["native"]


def test_the_int4_kernel_is_its_formula_and_the_same_bits_on_every_instruction_set():
    """Each compiled variant (C loops, AVX2 multiply-adds, AVX-512 VNNI) gives the same bits, and they are the
    formula of :mod:`specviz.runtime.cpu.int4` evaluated in float64: integer sums exact, one rounding per float step."""
    in_features, out_features = 1536, 256
    linear = torch.nn.Linear(in_features, out_features)
    values, scales, minimums = quantise_groups(linear.weight)
    layer = Int4Linear(linear)
    rows = unlike_rows(6, in_features)
    results = {march: int4_product(rows, layer.packed, out_features, layer.bias, march) for march in instruction_sets()}
    first = next(iter(results.values()))
    assert all(torch.equal(result, first) for result in results.values()), list(results)
    step = rows.abs().amax(dim=1, keepdim=True) / 127
    activations = torch.round(rows / step).clamp(-127, 127)
    weight = dequantised(values, scales, minimums)
    expected = (activations.double() @ weight.double().T) * step.double() + linear.bias.double()
    assert torch.allclose(first.double(), expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())
    exact = rows @ linear.weight.T + linear.bias  # the float product: 4-bit weights are near it, never equal
    error = ((first - exact).abs().amax(dim=1) / exact.abs().amax(dim=1)).max()
    assert 0 < error < 0.2


def built(march: str) -> Kernels:
    kernels = compiled_kernels(march)
    assert isinstance(kernels, Kernels), kernels
    return kernels


def test_the_row_attention_kernel_is_attention_each_row_as_alone_and_the_same_bits_on_every_instruction_set():
    """``row_attention.c`` on causal rows and on a tree's rows (each node: the cache and its ancestors): the float64
    attention to float32's rounding, the same bits compiled for every instruction set, and each row of a pass the bits
    of that row attended alone (what makes a pass over k + 1 rows k + 1 steps)."""
    generator = torch.Generator().manual_seed(3)
    cached, heads, kv_heads, d = 37, 4, 2, 32
    q = torch.randn(1, heads, 4, d, generator=generator)
    k, v = (torch.randn(1, kv_heads, cached + 4, d, generator=generator) * 3 for _ in range(2))
    causal = torch.ones(4, cached + 4, dtype=torch.bool).tril(cached)
    tree = torch.zeros(4, cached + 4, dtype=torch.bool)
    tree[:, :cached] = True
    for node, ancestors in enumerate(([0], [1], [0, 2], [1, 3])):
        tree[node, [cached + a for a in ancestors]] = True
    for seen in (causal, tree):
        counts, indices = keys_seen(seen[None, None], 4, cached + 4)
        assert (indices is None) == (seen is causal)
        results = {
            march: kernel_rows_attended(built(march), q, k, v, counts, indices, d**-0.5) for march in instruction_sets()
        }
        first = next(iter(results.values()))
        assert all(torch.equal(result, first) for result in results.values()), list(results)
        assert torch.allclose(first.double(), reference_attention(q, k, v, seen, d**-0.5), atol=1e-5)
        for row in range(4):
            alone = keys_seen(seen[None, None, row : row + 1], 1, cached + 4)
            own = kernel_rows_attended(built("native"), q[:, :, row : row + 1], k, v, *alone, d**-0.5)
            assert torch.equal(own[0, 0], first[0, row])


@pytest.mark.parametrize("biased", [True, False])
def test_int4_layers_of_one_input_in_one_buffer_give_each_layers_own_bits_in_one_call(biased):
    """q, k and v (gate and up likewise) laid end to end in one buffer: each layer alone keeps its bits, and one call
    over the buffer gives every layer's outputs bit for bit, on one row and on a pass of 7."""
    layers = [int4_layer(128, outputs, seed) for seed, outputs in enumerate((96, 32, 32))]
    for layer in layers if not biased else []:
        layer.place(layer.packed, None)
    rows = unlike_rows(7, 128)
    alone = [[layer(rows[:k]) for layer in layers] for k in (1, 7)]
    assert joint_of(layers) is None  # apart, they are not one buffer
    share_one_buffer(layers)
    joint = joint_of(layers)
    assert joint is not None and joint.outputs == (96, 32, 32)
    assert len({layer.packed.untyped_storage().data_ptr() for layer in layers}) == 1
    for k, before in zip((1, 7), alone):
        assert all(torch.equal(layer(rows[:k]), own) for layer, own in zip(layers, before))
        assert all(torch.equal(part, own) for part, own in zip(joint(rows[:k]), before))


def test_int4_weights_are_their_groups_minimum_plus_levels_of_its_step():
    weight = torch.randn(32, 64) * 0.1
    values, scales, minimums = quantise_groups(weight)
    assert values.dtype == torch.uint8 and int(values.max()) == 15 and int(values.min()) == 0
    error = (dequantised(values, scales, minimums) - weight).abs().reshape(32, 2, 32)
    assert (error <= scales.float()[..., None] / 2 + 1e-3 * scales.float()[..., None] + 1e-6).all()


QUANTISED_PAIRS = {"int8": ("float32", "int8"), "int4": ("float32", "int4")}  # each target with two drafts


@pytest.fixture(scope="module")
def quantised_pairs(tiny_dirs) -> dict[tuple[str, str], ModelPair]:
    """The tiny pair with an int8 and an int4 target, each with its draft in float32 and in its own precision (one
    shared target per precision)."""
    return {
        (dtype, draft): load_pair(tiny_config(tiny_dirs, dtype=dtype, draft_dtype=draft))
        for dtype, drafts in QUANTISED_PAIRS.items()
        for draft in drafts
    }


@pytest.mark.parametrize("dtype,kernel", [("int8", INT8), ("int4", INT4)])
def test_a_quantised_target_loads_on_its_kernel(quantised_pairs, dtype, kernel):
    pair = quantised_pairs[(dtype, "float32")]
    assert pair.target.precision == dtype and kernels_of(pair.target.model) == kernel
    assert pair.draft.precision == "float32" and kernels_of(pair.draft.model) not in (INT8, INT4)
    assert quantised_pairs[(dtype, dtype)].target is pair.target  # loaded once


def test_an_int8_model_holds_about_a_byte_a_weight_its_embedding_included(tiny_dirs, tiny_pair, quantised_pairs):
    """Every matrix of an int8 target (and of an int4 draft) is quantised, its input embedding too: a lookup gives the
    row's int8 values times the row's scale, within half a step of the float32 table."""
    int4_draft = load_pair(tiny_config(tiny_dirs, dtype="float32", draft_dtype="int4")).draft
    for model, float_model in (
        (quantised_pairs[("int8", "float32")].target.model, tiny_pair.target.model),
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


@pytest.mark.parametrize("dtype", list(QUANTISED_PAIRS))
def test_a_quantised_targets_pass_over_k_tokens_is_k_steps_bit_for_bit(quantised_pairs, dtype):
    """The property exactness rests on, for the whole model (products, attention, norms): each row of a pass over
    several new tokens, a causal chain or a tree's branch, has the bits of that token's own step."""
    target = quantised_pairs[(dtype, "float32")].target
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


def transformers_pass(target, context: list[int], new_ids: list[int], layout: TreeLayout | None) -> torch.Tensor:
    """Logits (len(new_ids), V) of transformers' own forward, after ``context``, over ``new_ids`` (causal, or as
    ``layout`` places them): the model's own modules, not the direct Llama body."""
    cache = DynamicCache()
    with torch.inference_mode():
        target.model(input_ids=torch.tensor([context]), past_key_values=cache, use_cache=True)
        inputs = {"input_ids": torch.tensor([new_ids])}
        if layout is not None:
            inputs.update(
                attention_mask=layout.additive_mask(torch.float32, target.device),
                position_ids=torch.tensor([layout.positions]),
            )
        return target.model(**inputs, past_key_values=cache, use_cache=True).logits[0]


@pytest.mark.parametrize("dtype", list(QUANTISED_PAIRS))
def test_a_quantised_targets_lean_passes_are_transformers_own_bit_for_bit(quantised_pairs, dtype):
    """A quantised target's passes take the direct Llama body (no per-layer Python of transformers) only because it
    computes the same bits: a step, a causal pass and a tree's pass, each equal to transformers' forward of the same
    model."""
    target = quantised_pairs[(dtype, "float32")].target
    lean_weights = direct_body_weights(target)
    assert lean_weights is not None
    assert all((layer.qkv is not None) == (dtype == "int4") for layer in lean_weights.layers)  # int4: joint calls
    # int4: both run the package's layer, transformers' forward through its decoder layers
    int4_layers = [isinstance(layer, Int4DecoderLayer) for layer in target.model.model.layers]
    assert (lean_weights.int4_kernels is not None) == (dtype == "int4") and set(int4_layers) == {dtype == "int4"}
    assert direct_body_weights(quantised_pairs[(dtype, "float32")].draft) is None  # a float draft's is not
    context, continuation = PROMPT, [7, 3, 11, 5]
    cached = len(context)
    allowed = torch.zeros(3, cached + 3, dtype=torch.bool)
    allowed[:, :cached] = True
    allowed[0, cached], allowed[1, cached + 1], allowed[2, [cached, cached + 2]] = True, True, True
    tree = TreeLayout(positions=[cached, cached, cached + 1], allowed=allowed)
    for new_ids, layout in (([7], None), (continuation, None), ([7, 13, 3], tree)):
        lean = KVCachedSequence()
        lean.feed(full_forward, target, context, 1)
        logits = lean.feed(full_forward, target, new_ids, len(new_ids), layout)
        assert torch.equal(logits, transformers_pass(target, context, new_ids, layout))


@pytest.mark.parametrize("role", ["target", "draft"])
def test_an_int4_models_layers_run_in_two_c_calls_with_the_lean_steps_numbers(quantised_pairs, role):
    """An int4 model, target or draft, runs each decoder layer in two calls of ``int4_layer.c`` (norms summed by the
    package, not by torch): the direct Llama step's torch layers on the same int4 products give its hidden states up to
    that rounding, for a chain and a tree (a RoPE or mask slip is far outside it)."""
    model = getattr(quantised_pairs[("int4", "int4")], role)
    weights = llama_weights(model.model)
    assert weights is not None and weights.int4_kernels is not None
    torch_layers = dataclasses.replace(weights, int4_kernels=None)
    cached = len(PROMPT)
    allowed = torch.zeros(3, cached + 3, dtype=torch.bool)
    allowed[:, :cached] = True
    allowed[0, cached], allowed[1, cached + 1], allowed[2, [cached, cached + 2]] = True, True, True
    tree = TreeLayout(positions=[cached, cached, cached + 1], allowed=allowed)
    for new_ids, layout in (([7], None), ([7, 3, 11, 5], None), ([7, 13, 3], tree)):
        hidden = []
        for lean_weights in (weights, torch_layers):
            cache = DynamicCache()
            model_body(model, lean_weights, PROMPT, cache, 0, 1)
            hidden.append(model_body(model, lean_weights, new_ids, cache, cached, len(new_ids), layout))
        difference = (hidden[0] - hidden[1]).abs().max()
        assert 0 < difference <= 0.05 * hidden[1].abs().max(), (role, new_ids, float(difference))


@pytest.mark.parametrize("dtype,draft_dtype", [(t, d) for t, drafts in QUANTISED_PAIRS.items() for d in drafts])
@pytest.mark.parametrize("gamma", [2, 5])
def test_greedy_is_the_quantised_targets_own_greedy(tiny_dirs, quantised_pairs, dtype, draft_dtype, gamma):
    pair = quantised_pairs[(dtype, draft_dtype)]
    config = tiny_config(tiny_dirs, dtype=dtype, draft_dtype=draft_dtype, gamma=gamma)
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=pair)
    assert trace.output_ids == target_greedy(pair.target, PROMPT, 24)
    assert {p.status for r in trace.rounds for p in r.draft} >= {"accepted", "rejected"}


@pytest.mark.parametrize("dtype", list(QUANTISED_PAIRS))
@pytest.mark.parametrize("depth", [2, 4])
def test_greedy_trees_are_the_quantised_targets_own_greedy(tiny_dirs, quantised_pairs, dtype, depth):
    config = tiny_config(
        tiny_dirs,
        dtype=dtype,
        draft_dtype="float32",
        drafter="tree",
        tree_mode="constant",
        branching=2,
        tree_depth=depth,
    )
    pair = quantised_pairs[(dtype, "float32")]
    trace = speculative_decode(config, prompt_ids=PROMPT, pair=pair)
    assert trace.output_ids == target_greedy(pair.target, PROMPT, 24)
    assert any(r.tree.path for r in trace.rounds)


@pytest.mark.parametrize("dtype,bound", [("int8", 0.1 * INT8_MAX / weight_levels(cpu_flags())), ("int4", 0.6)])
def test_a_quantised_target_is_not_the_float32_one(tiny_dirs, tiny_pair, quantised_pairs, dtype, bound):
    """What "exact" means here: to the quantised target as run, a coarser model than the float32 one (4 bits far
    coarser: the tiny target's sharp random weights, init 0.3, compound each layer's error; 0.36 measured). Where the
    CPU has no int8 dot products, weights keep 63 levels, not 127, and the error doubles (0.12 measured on an AVX2-only
    EPYC), so the int8 bound scales with the levels."""
    ids = torch.tensor([PROMPT])
    with torch.inference_mode():
        exact = tiny_pair.target.model(ids).logits
        coarse = quantised_pairs[(dtype, "float32")].target.model(ids).logits
    assert 0 < ((coarse - exact).abs().max() / exact.abs().max()) < bound


@pytest.mark.slow  # a statistical test at its computed power: many samples
@pytest.mark.parametrize("dtype", list(QUANTISED_PAIRS))
def test_speculative_sampling_with_a_quantised_target_is_lossless_against_its_distribution(
    tiny_dirs, quantised_pairs, dtype
):
    config = tiny_config(tiny_dirs, rule="sample", gamma=3, max_new_tokens=2, dtype=dtype, draft_dtype="float32")
    assert_sampling_is_lossless(quantised_pairs[(dtype, "float32")], config)


@pytest.mark.parametrize("dtype", list(QUANTISED_PAIRS))
def test_a_quantised_precision_round_trips_in_a_link(dtype):
    defaults = DecodeConfig()
    state = parse_query(to_query(defaults.replace(dtype=dtype), "hello", 2, defaults), defaults)
    assert state.config.dtype == dtype and state.config.draft_precision == dtype and not state.messages
    bad = parse_query({"dtype": "int3"}, defaults)
    assert bad.config.dtype == defaults.dtype and any("dtype" in m for m in bad.messages)


@pytest.mark.parametrize("dtype", list(QUANTISED_PAIRS))
def test_a_race_verdict_names_the_quantised_target_as_the_one_that_decided(dtype):
    config = DecodeConfig(dtype=dtype, rule="greedy")
    assert f"{dtype} target as run" in agreement(config, (1, 2, 3), (1, 2, 3))
    assert agreement(config, (1, 2, 3), (1, 2, 4)).startswith(f"2 of 3 tokens identical: greedy {dtype} should match")
    assert "up to rounding" in agreement(config.replace(dtype="bfloat16"), (1, 2, 3), (1, 2, 4))
