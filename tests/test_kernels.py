"""Each C kernel (``specviz/runtime/cpu/*.c``) called directly through its binding (:mod:`specviz.runtime.cpu.compiled`)
on tiny hand-built inputs, against the same math in plain torch: the int4 product, attention one row at a time, the
int4 decoder layer's two halves; and the ctypes mirrors of ``kernels.h``'s structs against the layout the compiler
gave them. Where the inputs make every step exact the comparison is bit for bit; elsewhere the tolerance is argued
where it is set."""

from __future__ import annotations

import ctypes

import pytest
import torch

from specviz.runtime.cpu.compiled import (
    STRUCTS,
    Int,
    Int4LayerArgs,
    KernelArgs,
    Kernels,
    Pointer,
    RowsAttentionArgs,
    address,
    c_compiler,
    c_layout,
    compiled_kernels,
    layout_differences,
    mirror_layout,
)
from specviz.runtime.cpu.int4 import BLOCK_BYTES, GROUP, TILE, Groups, dequantised, pack_groups
from specviz.runtime.cpu.row_attention import kernel_rows_attended

pytestmark = pytest.mark.skipif(c_compiler() is None, reason="no C compiler here to build the kernels (install gcc)")


@pytest.fixture(scope="module")
def kernels() -> Kernels:
    built = compiled_kernels()
    assert isinstance(built, Kernels), built
    return built


def known_groups(outputs: int, inputs: int, generator: torch.Generator) -> Groups:
    """Q in 0..15, scales 2^-4..2^-6 and minimums -8 times the scale: weights s (Q - 8), about as many below zero as
    above (sums of them stay near their inputs' size), each a float32 with bits to spare, as is every sum the kernel
    forms of them with integer activations (exact)."""
    groups = (outputs, inputs // GROUP)
    values = torch.randint(0, 16, (*groups, GROUP), generator=generator, dtype=torch.uint8)
    scales = (2.0 ** -torch.randint(4, 7, groups, generator=generator)).half()
    return values, scales, -8 * scales


def int4_formula(x: torch.Tensor, groups: Groups, bias: torch.Tensor | None) -> torch.Tensor:
    """The int4 product of :mod:`specviz.runtime.cpu.int4` in float64: each row rounded to 127 levels of its own step
    t = max|x| / 127 (taken in x's dtype, as the kernel takes it in float32), times the dequantised weight, times t."""
    step = x.abs().amax(dim=1, keepdim=True) / 127
    levels = torch.round(x / step).clamp(-127, 127)
    y = (levels.double() @ dequantised(*groups).double().T) * step.double()
    return y if bias is None else y + bias.double()


def product(kernels: Kernels, x: torch.Tensor, groups: Groups, bias: torch.Tensor | None) -> torch.Tensor:
    """y = x W^T + b through ``int4_rows_product`` itself, every address checked."""
    rows, inputs = x.shape
    outputs = groups[0].shape[0]
    packed, y = pack_groups(*groups), torch.empty(rows, outputs)
    weight = address("weight", packed, (outputs // TILE, inputs // GROUP, BLOCK_BYTES), torch.uint8)
    bias_at = None if bias is None else address("bias", bias, (outputs,))
    failed = kernels.product(address("x", x, (rows, inputs)), rows, inputs, outputs, weight, bias_at, y.data_ptr())
    assert failed == 0
    return y


@pytest.mark.parametrize("rows", [1, 3, 6, 9])  # one row; a block of rows; blocks of rows split as even as they go
@pytest.mark.parametrize("biased", [True, False])
def test_the_int4_product_of_known_groups_is_the_dequantised_matmul_exactly(kernels, biased, rows):
    """Integer activations whose largest is 127 in every row (step t = 1: the row is its own int8 levels) times
    :func:`known_groups` plus a bias in halves: every product, group sum and fused multiply-add is exact in float32
    (multiples of 2^-6 below 2^14: 20 of float32's 24 bits), so the kernel IS the float64 matmul, bit for bit,
    over 2 tiles of outputs and 2 groups of inputs."""
    generator = torch.Generator().manual_seed(1)
    inputs, outputs = 2 * GROUP, 2 * TILE
    x = torch.randint(-127, 128, (rows, inputs), generator=generator).float()
    x[:, 5] = torch.tensor([127.0, -127.0] * rows)[:rows]
    groups = known_groups(outputs, inputs, generator)
    bias = torch.randint(-8, 8, (outputs,), generator=generator) / 2 if biased else None
    expected = x.double() @ dequantised(*groups).double().T + (0 if bias is None else bias.double())
    assert torch.equal(product(kernels, x, groups, bias), expected.float())


def test_each_row_of_an_int4_product_is_the_rows_product_alone(kernels):
    """What greedy exactness at int4 rests on: a pass over k rows gives each row the bits of its own one-row pass
    (rows never meet, whatever the block they are computed in), on real-valued rows and random groups."""
    generator = torch.Generator().manual_seed(2)
    inputs, outputs = 4 * GROUP, 3 * TILE
    groups = known_groups(outputs, inputs, generator)
    x = torch.randn(9, inputs, generator=generator)
    together = product(kernels, x, groups, None)
    for row in range(9):
        assert torch.equal(together[row], product(kernels, x[row : row + 1].contiguous(), groups, None)[0])


def attended(kernels: Kernels, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seen: torch.Tensor, scale: float):
    """``rows_attention`` on q (heads, T, d), k and v (kv heads, S, d) over the keys ``seen`` (T, S) marks -> (1, T,
    heads, d): the counts, and the indices where a row does not see the first keys, as the kernel takes them."""
    counts = seen.sum(dim=1, dtype=torch.int32)
    causal = bool((seen == (torch.arange(seen.shape[1]) < counts[:, None])).all())
    indices = None if causal else torch.sort((~seen).to(torch.uint8), dim=1, stable=True).indices.to(torch.int32)
    return kernel_rows_attended(kernels, q[None], k[None], v[None], counts, indices, scale)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seen: torch.Tensor, scale: float):
    """softmax(q k^T * scale) v in float64 over each row's seen keys: q (1, heads, T, d), k and v (1, kv heads, S, d),
    seen (T, S) bool -> (1, T, heads, d)."""
    group = q.shape[1] // k.shape[1]
    k64, v64 = (t.double().repeat_interleave(group, dim=1) for t in (k, v))
    scores = (q.double() @ k64.transpose(-1, -2) * scale).masked_fill(~seen, float("-inf"))
    return (scores.softmax(-1) @ v64).transpose(1, 2)


CAUSAL = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
TREE = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 0], [1, 1, 0, 1]], dtype=torch.bool)  # each row: the keys it sees


@pytest.mark.parametrize("seen", [CAUSAL, TREE], ids=["causal", "tree"])
def test_row_attention_where_one_key_leads_by_far_is_that_keys_value(kernels, seen):
    """Key j = j u, the query 100 u: each score leads the one before by 100, so the exponentials of all but a row's
    last seen key fall below exp(-87) (the kernel's floor, 1.6e-38) and vanish beside 1 in float32: every head of a
    row returns exactly the value of the last key it sees (two query heads share each key/value head)."""
    heads, kv_heads, d, keys = 4, 2, 16, 4
    u = torch.zeros(d)
    u[3] = 1.0
    k = (torch.arange(keys, dtype=torch.float32)[:, None] * u).expand(kv_heads, keys, d).contiguous()
    v = torch.arange(kv_heads * keys * d, dtype=torch.float32).reshape(kv_heads, keys, d) / 8
    q = (100 * u).expand(heads, len(seen), d).contiguous()
    last = [int(row.nonzero().max()) for row in seen]
    expected = torch.stack([torch.stack([v[h // 2, last[r]] for h in range(heads)]) for r in range(len(seen))])
    assert torch.equal(attended(kernels, q, k, v, seen, 1.0)[0], expected)


@pytest.mark.parametrize("seen", [CAUSAL, TREE], ids=["causal", "tree"])
def test_row_attention_is_softmax_attention_over_the_keys_each_row_sees(kernels, seen):
    """Random q, k and v, against softmax(q k^T * scale) v in float64 over each row's keys. The kernel rounds each of
    a 16-dimension dot product's adds, its exponential (Cephes' polynomial, within 2 ulp) and a sum of at most 4
    weighted values to float32: a few ulp of the largest value, so 1e-5 of it (measured here: 1/150 of that), while a
    key wrongly seen or missed would move a row by a good part of its values."""
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(4, 3, 16, generator=generator)
    k, v = (torch.randn(2, 4, 16, generator=generator) for _ in range(2))
    expected = reference_attention(q[None], k[None], v[None], seen, 0.25)
    atol = 1e-5 * v.abs().max().item()
    assert torch.allclose(attended(kernels, q, k, v, seen, 0.25).double(), expected, rtol=0, atol=atol)


def test_the_attention_kernel_refuses_tensors_of_the_wrong_shape_before_it_reads_them(kernels):
    q, k, v = torch.zeros(1, 2, 3, 16), torch.zeros(1, 1, 4, 16), torch.zeros(1, 1, 4, 16)
    with pytest.raises(ValueError, match="seen_count"):  # counts for 2 rows of 3
        kernel_rows_attended(kernels, q, k, v, torch.ones(2, dtype=torch.int32), None, 1.0)
    with pytest.raises(ValueError, match="a row sees 1 to 4 keys"):  # a row told to see 5 of 4 keys
        kernel_rows_attended(kernels, q, k, v, torch.tensor([1, 2, 5], dtype=torch.int32), None, 1.0)
    with pytest.raises(ValueError, match="seen_index"):  # indices for 3 keys of 4
        kernel_rows_attended(
            kernels, q, k, v, torch.ones(3, dtype=torch.int32), torch.zeros(3, 3, dtype=torch.int32), 1.0
        )
    with pytest.raises(ValueError, match="torch.int32"):
        kernel_rows_attended(kernels, q, k, v, torch.ones(3, dtype=torch.int64), None, 1.0)


def rms_norm(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    """g * x / sqrt(mean(x^2) + eps), in x's dtype, in ``int4_layer.c``'s order of operations."""
    return gain * (x * (1 / torch.sqrt((x * x).sum(dim=-1, keepdim=True) / x.shape[-1] + eps)))


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """(x_i, x_{i+d/2}) -> (x_i cos - x_{i+d/2} sin, x_{i+d/2} cos + x_i sin) for x (..., T, d), cos and sin (T, d)."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


ROWS, HIDDEN, HEADS, KV_HEADS, D, INTERMEDIATE, EPS = 3, 64, 2, 1, 16, 32, 1e-5


def layer_args(**fields: object) -> Int4LayerArgs:
    """The layer's shapes (3 rows of 64, 2 query heads of 16 sharing 1 key/value head, an MLP of 32) and ``fields``."""
    shapes = {"rows": ROWS, "hidden": HIDDEN, "heads": HEADS, "kv_heads": KV_HEADS, "d": D, "eps": EPS}
    return Int4LayerArgs(**shapes, **fields)


def test_int4_layer_in_is_rms_norm_then_the_qkv_product_then_rope(kernels):
    """x's rows are ±c (c per row), so mean(x^2) = c^2 exactly and the norm below is, in float32, the kernel's own
    bits (the same correctly rounded operations in the same order); the product then rounds the same activations
    (:func:`int4_formula`), and what is left is float32's rounding of the product's group sums and the rotation,
    a few ulp: 1e-5 of the largest value (measured here: 1/70 to 1/250 of that), where a wrong head, group or angle
    moves values by their own size."""
    generator = torch.Generator().manual_seed(3)
    signs = torch.randint(0, 2, (ROWS, HIDDEN), generator=generator) * 2 - 1
    x = (signs * torch.tensor([[0.75], [1.5], [3.0]])).float()
    gain = torch.rand(HIDDEN, generator=generator) + 0.5
    width = (HEADS + 2 * KV_HEADS) * D
    groups, bias = known_groups(width, HIDDEN, generator), torch.randn(width, generator=generator)
    angles = torch.rand(ROWS, D, generator=generator) * 6
    cos, sin = angles.cos(), angles.sin()
    q, k, v = torch.empty(HEADS, ROWS, D), torch.empty(KV_HEADS, ROWS, D), torch.empty(KV_HEADS, ROWS, D)
    packed = pack_groups(*groups)
    args = layer_args(
        x=address("x", x, (ROWS, HIDDEN)),
        attention_norm=address("gain", gain, (HIDDEN,)),
        qkv=packed.data_ptr(),
        qkv_bias=address("bias", bias, (width,)),
        cos=address("cos", cos, (ROWS, D)),
        sin=address("sin", sin, (ROWS, D)),
        q=q.data_ptr(),
        k=k.data_ptr(),
        v=v.data_ptr(),
    )
    assert kernels.layer_in(args) == 0
    projected = int4_formula(rms_norm(x, gain, EPS), groups, bias)  # (rows, (heads + 2 kv heads) d)
    heads = projected.reshape(ROWS, -1, D).transpose(0, 1)
    expected = (rope(heads[:HEADS], cos, sin), rope(heads[HEADS : HEADS + KV_HEADS], cos, sin), heads[-KV_HEADS:])
    for name, got, want in zip("qkv", (q, k, v), expected):
        assert torch.allclose(got.double(), want, rtol=0, atol=1e-5 * want.abs().max().item()), name


def test_int4_layer_out_is_attention_o_and_the_swiglu_mlp_added_to_x(kernels):
    """x += W_o Attn(q, keys, values) over 2 cached keys and the 3 rows' own (causal); h = n2(x); x += W_down
    (silu(h W_gate^T) * h W_up^T), against the same steps in float64. The kernel's float32 roundings (the attention's,
    the norm's sum, the group sums) are ulps, each activation rounded to the same one of 127 levels as the float64
    path's (a level between them would be a tie missed by an ulp: not these inputs), so the two agree to 1e-5 of x's
    largest value (measured here: 1/50 of that), where a missing residual, a wrong gain or gate moves x by about
    its own size."""
    generator = torch.Generator().manual_seed(4)
    keys_n = 2 + ROWS
    x = torch.randn(ROWS, HIDDEN, generator=generator)
    q = torch.randn(HEADS, ROWS, D, generator=generator)
    keys, values = (torch.randn(KV_HEADS, keys_n, D, generator=generator) for _ in range(2))
    seen = torch.ones(ROWS, keys_n, dtype=torch.bool).tril(keys_n - ROWS)
    o = known_groups(HIDDEN, HEADS * D, generator), torch.randn(HIDDEN, generator=generator)
    gate_up = known_groups(2 * INTERMEDIATE, HIDDEN, generator), torch.randn(2 * INTERMEDIATE, generator=generator)
    down = known_groups(HIDDEN, INTERMEDIATE, generator), None
    gain = torch.rand(HIDDEN, generator=generator) + 0.5
    counts = seen.sum(dim=1, dtype=torch.int32)
    packed = [pack_groups(*groups) for groups, _ in (o, gate_up, down)]
    got = x.clone()
    args = layer_args(
        x=address("x", got, (ROWS, HIDDEN)),
        q=address("q", q, (HEADS, ROWS, D)),
        keys=address("keys", keys, (KV_HEADS, keys_n, D)),
        values=address("values", values, (KV_HEADS, keys_n, D)),
        n_keys=keys_n,
        seen_count=address("counts", counts, (ROWS,), torch.int32),
        seen_index=None,
        scale=D**-0.5,
        o=packed[0].data_ptr(),
        o_bias=o[1].data_ptr(),
        mlp_norm=address("gain", gain, (HIDDEN,)),
        gate_up=packed[1].data_ptr(),
        gate_up_bias=gate_up[1].data_ptr(),
        intermediate=INTERMEDIATE,
        down=packed[2].data_ptr(),
        down_bias=None,
    )
    assert kernels.layer_out(args) == 0
    attention = reference_attention(q[None], keys[None], values[None], seen, D**-0.5)[0].reshape(ROWS, HEADS * D)
    mid = x.double() + int4_formula(attention, *o)
    gate, up = int4_formula(rms_norm(mid, gain.double(), EPS), *gate_up).chunk(2, dim=-1)
    expected = mid + int4_formula(torch.nn.functional.silu(gate) * up, *down)
    assert torch.allclose(got.double(), expected, rtol=0, atol=1e-5 * expected.abs().max().item())


def test_the_ctypes_mirrors_are_the_headers_structs_as_compiled(kernels):
    """Every field of :data:`~specviz.runtime.cpu.compiled.STRUCTS` at the offset and of the size the compiler gave
    it in ``kernels.h``'s struct, no field on one side only, the same total size; and a mirror with two fields
    swapped is told apart."""
    library = ctypes.CDLL(str(kernels.library))
    assert layout_differences(library) == []
    for struct in STRUCTS:
        size, fields = c_layout(library, struct.c_name)
        assert (size, fields) == mirror_layout(struct) and len(fields) == len(struct._fields_) and size > 0

    class Swapped(KernelArgs):
        c_name = "rows_attention_args"
        _fields_ = [("rows", Int), ("q", Pointer), *RowsAttentionArgs._fields_[2:]]

    assert layout_differences(library, (Swapped,))


def test_a_tensor_reaches_a_kernel_only_contiguous_and_of_its_shape_and_dtype():
    x = torch.zeros(4, 6)
    assert address("x", x, (4, 6)) == x.data_ptr()
    for wrong, said in [
        (x.T, "non-contiguous"),
        (x[:, :3], "non-contiguous"),
        (x.double(), "torch.float64"),
        (x.reshape(6, 4), r"shape \(6, 4\)"),
    ]:
        with pytest.raises(ValueError, match=said):
            address("x", wrong, (4, 6))
