"""A published GGUF's own Q4_K blocks as the int4 precision's groups (specviz.runtime.cpu.q4k): unpacked as llama.cpp
de-quantises them, kept only where they are the checkpoint's weights, and run by the int4 target as they are."""

from __future__ import annotations

import numpy as np
import torch
from gguf import MODEL_ARCH, GGMLQuantizationType, GGUFWriter, get_tensor_name_map
from gguf.quants import dequantize
from safetensors.torch import load_file, save_file

from specviz.models.loading import forget_loaded_models, load_model
from specviz.runtime.cpu.int4 import Int4Linear, pack_groups, quantise_groups
from specviz.runtime.cpu.q4k import Q4K_FILE, faithful, q4k_groups, q4k_parts, write_q4k_blocks
from tests.tiny import make_tiny_model


def random_q4k_blocks(rows: int, columns: int, seed: int) -> torch.Tensor:
    """Q4_K rows, (rows, columns / 256 * 144) uint8: every byte at random but d and dmin, drawn at a real model's
    scale (any bytes are a valid block of values, scales and minimums)."""
    generator = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, 256, (rows, columns // 256, 144), generator=generator, dtype=torch.uint8)
    for start in (0, 2):  # d, dmin: float16 in [1e-4, 1e-3)
        halves = (torch.rand(rows, columns // 256, generator=generator) * 9e-4 + 1e-4).half()
        blocks[..., start : start + 2] = halves.view(torch.uint8).reshape(rows, -1, 2)
    return blocks.reshape(rows, -1)


def gguf_dequantised(blocks: torch.Tensor) -> torch.Tensor:
    """The gguf package's own de-quantisation of Q4_K rows (llama.cpp's formula, in numpy), (out, in) float32."""
    return torch.from_numpy(dequantize(blocks.numpy(), GGMLQuantizationType.Q4_K))


def test_q4k_blocks_unpack_to_what_the_gguf_reader_de_quantises_and_keep_their_4_bit_values():
    blocks = random_q4k_blocks(48, 768, seed=0)
    values, scales, minimums = q4k_parts(blocks)
    assert values.dtype == torch.uint8 and int(values.max()) == 15 and int(values.min()) == 0
    unpacked = (scales[..., None] * values.float() - minimums[..., None]).reshape(48, 768)
    assert torch.equal(unpacked, gguf_dequantised(blocks))  # the same 6-bit scales and minimums, bit for bit
    groups = q4k_groups(blocks)
    assert torch.equal(groups[0], values)  # the 4-bit values themselves, only s and m rounded to float16
    assert faithful(groups, gguf_dequantised(blocks))
    assert not faithful(groups, gguf_dequantised(blocks).roll(1, dims=0))  # rows of another order are refused
    assert not faithful(quantise_groups(gguf_dequantised(blocks)), gguf_dequantised(blocks))  # a 2nd rounding is not


Q4K_LAYERS = ("self_attn.q_proj", "self_attn.k_proj", "mlp.gate_proj", "mlp.down_proj")  # given Q4_K blocks here


def write_tiny_gguf(directory, layers: int) -> tuple[str, dict[str, torch.Tensor], str]:
    """A tiny Qwen2 whose ``Q4K_LAYERS`` hold the de-quantisation of random Q4_K blocks, saved as a checkpoint and
    as a GGUF carrying those blocks (the other tensors in float32), plus one Q4_K tensor in the GGUF that is NOT
    the checkpoint's weight. Returns (the checkpoint's directory, the blocks by checkpoint name, that tensor's name)."""
    path = make_tiny_model(directory, seed=5, layers=layers, hidden=256, qwen2=True)
    weights = load_file(f"{path}/model.safetensors")
    blocks = {}
    for layer in range(layers):
        for seed, module in enumerate(Q4K_LAYERS):
            name = f"model.layers.{layer}.{module}.weight"
            blocks[name] = random_q4k_blocks(*weights[name].shape, seed=10 * layer + seed)
            weights[name] = gguf_dequantised(blocks[name]).contiguous()
    save_file(weights, f"{path}/model.safetensors", metadata={"format": "pt"})
    misplaced = "model.layers.0.self_attn.v_proj.weight"  # its blocks in the GGUF, another weight in the checkpoint
    name_map = get_tensor_name_map(MODEL_ARCH.QWEN2, layers)
    writer = GGUFWriter(f"{path}/tiny.gguf", "qwen2")
    writer.add_block_count(layers)
    for name, weight in weights.items():
        gguf_name = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
        if name in blocks or name == misplaced:
            stored = blocks[name] if name in blocks else random_q4k_blocks(*weight.shape, seed=99)
            writer.add_tensor(gguf_name, stored.numpy(), raw_dtype=GGMLQuantizationType.Q4_K)
        else:
            writer.add_tensor(gguf_name, weight.numpy().astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, blocks, misplaced


def test_a_gguf_models_int4_target_runs_the_files_own_q4k_blocks_and_quantises_the_rest(tmp_path):
    path, blocks, misplaced = write_tiny_gguf(tmp_path / "tiny", layers=2)
    assert write_q4k_blocks(tmp_path / "tiny" / "tiny.gguf", tmp_path / "tiny") == len(blocks)
    kept = load_file(f"{path}/{Q4K_FILE}")
    assert set(kept) == set(blocks) and misplaced not in kept  # the misplaced tensor is left to be quantised
    assert all(torch.equal(kept[name], blocks[name]) for name in blocks)
    try:
        model = load_model(path, dtype="int4").model
        weights = load_file(f"{path}/model.safetensors")
        int4_layers = {name: m for name, m in model.named_modules() if isinstance(m, Int4Linear)}
        assert {f"{name}.weight" for name, m in int4_layers.items() if m.published} == set(blocks)
        for name, layer in int4_layers.items():
            weight = f"{name}.weight"
            groups = q4k_groups(blocks[weight]) if weight in blocks else quantise_groups(weights[weight])
            assert torch.equal(layer.packed, pack_groups(*groups)), name  # the file's bits, or quantised as before
    finally:
        forget_loaded_models()
