"""A published GGUF's own 4-bit weights as the int4 precision's groups: llama.cpp's Q4_K blocks, read, not re-made.

A Q4_K super-block (ggml's ``block_q4_K``: 144 bytes for 256 consecutive weights of a row) holds two float16s d and
dmin, twelve bytes of eight 6-bit sub-block scales sc_j and minimums m_j (bytes 0-3 hold sc_0..3 in their low six
bits, bytes 4-7 m_0..3; bytes 8-11 the low four bits of sc_4..7 and, in their high half, of m_4..7, whose top two
bits are the top two bits of bytes 0-3 and 4-7), then 128 bytes of 4-bit values, 32 bytes for each 64 weights:
sub-block 2c in the low nibbles, 2c + 1 in the high ones. Weight i of sub-block j is

    w_i = d * sc_j * q_i - dmin * m_j,   q_i in 0..15,

which is the int4 precision's group (:mod:`specviz.runtime.cpu.int4`: 32 inputs, W = s * Q + m) with Q = q, s = d * sc_j
and m = -dmin * m_j: the same 4-bit values, only s and m rounded to the float16 the kernel reads (half a unit in
their 11th bit: a weight moves by at most 2^-12 of s * 15 + |m|, far below the 4-bit step s itself). The published
target on int4 then runs the weights llama.cpp runs, instead of a second 4-bit rounding of their float32
de-quantisation. Tensors of other types (Q6_K, Q5_0, Q8_0 in a Q4_K_M file) have no 4-bit form and are quantised
from their float32 values as before.

Which tensor is which layer is checked, not assumed: a tensor's groups are kept only where their de-quantisation
equals the float32 checkpoint's weight to that float16 rounding (:func:`write_q4k_blocks`), so a reordered or
renamed tensor falls back to quantisation instead of loading wrong weights. No streamlit.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from gguf import MODEL_ARCH, MODEL_ARCH_NAMES, GGMLQuantizationType, GGUFReader, get_tensor_name_map
from safetensors import safe_open
from safetensors.torch import save_file

Q4K_FILE = "q4k-blocks.safetensors"  # beside a fetched model's float32 safetensors: the Q4_K blocks it came from
BLOCK_BYTES, SUB_BLOCK_WEIGHTS = 144, 32  # a super-block's bytes (256 weights), a sub-block's weights
FLOAT16_ROUNDING = 2.0**-11  # float16's unit roundoff: half a unit in the last of its 11 significant bits


def q4k_parts(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A weight's Q4_K rows, (out, in / 256 * 144) uint8, unpacked exactly: (q (out, in / 32, 32) uint8 in 0..15,
    d * sc_j and dmin * m_j (out, in / 32) float32: 11 + 6 significant bits, no rounding): w = d sc_j q - dmin m_j."""
    outputs = blocks.shape[0]
    b = blocks.reshape(outputs, -1, BLOCK_BYTES)
    d, dmin = (b[..., start : start + 2].contiguous().view(torch.float16).float() for start in (0, 2))
    low, high, tops = (b[..., 4 + 4 * k : 8 + 4 * k].int() for k in range(3))  # the three rows of scale bytes
    sub_scales = torch.cat([low & 63, (tops & 15) | ((low >> 6) << 4)], dim=-1)
    sub_minimums = torch.cat([high & 63, (tops >> 4) | ((high >> 6) << 4)], dim=-1)
    nibbles = b[..., 16:].reshape(outputs, -1, 4, 1, SUB_BLOCK_WEIGHTS)
    values = torch.cat([nibbles & 15, nibbles >> 4], dim=-2)  # (out, blocks, chunk c, low / high, 32)
    return (
        values.reshape(outputs, -1, SUB_BLOCK_WEIGHTS),
        (d * sub_scales.float()).reshape(outputs, -1),
        (dmin * sub_minimums.float()).reshape(outputs, -1),
    )


def q4k_groups(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A weight's Q4_K rows as :func:`specviz.runtime.cpu.int4.quantise_groups` gives a weight: (Q (out, in / 32, 32)
    uint8, s (out, in / 32) float16, m (out, in / 32) float16), s = d sc_j and m = -dmin m_j rounded to float16."""
    values, scales, minimums = q4k_parts(blocks)
    return values, scales.half(), (-minimums).half()


def faithful(groups: tuple[torch.Tensor, torch.Tensor, torch.Tensor], weight: torch.Tensor) -> bool:
    """Whether groups de-quantise to ``weight`` (the float32 checkpoint's, de-quantised from the same blocks) up to
    the float16 rounding of s and m: |s Q + m - w| <= 2^-11 (15 |s| + |m|) + 2^-23 |w| in every group (the last
    term: float32's own rounding of both de-quantisations)."""
    values, scales, minimums = groups
    s, m = scales.float()[..., None], minimums.float()[..., None]
    w = weight.float().reshape(values.shape)
    bound = FLOAT16_ROUNDING * (15 * s.abs() + m.abs()) + 2.0**-23 * w.abs() + 2.0**-24
    return bool(((s * values.float() + m - w).abs() <= bound).all())


def write_q4k_blocks(gguf: Path, directory: Path) -> int:
    """Write, beside the float32 checkpoint in ``directory`` (de-quantised from ``gguf``), the Q4_K blocks of the
    GGUF's repeated layers (``blk.*``) under their checkpoint names, each kept only where its groups are
    :func:`faithful` to the checkpoint's weight (the name map is gguf's own; a tensor it cannot place, or one stored
    reordered, is left to be quantised). Atomic: a loader sees the whole file or none. Returns how many were kept."""
    reader = GGUFReader(gguf)
    kept = {}
    with safe_open(directory / "model.safetensors", "pt") as checkpoint:
        to_gguf = _checkpoint_names(reader, set(checkpoint.keys()))
        for tensor in reader.tensors:
            name = to_gguf.get(tensor.name)
            if tensor.tensor_type != GGMLQuantizationType.Q4_K or name is None or not tensor.name.startswith("blk."):
                continue
            blocks = torch.from_numpy(tensor.data.copy()).reshape(int(tensor.shape[1]), -1)
            if faithful(q4k_groups(blocks), checkpoint.get_tensor(name)):
                kept[name] = blocks
    partial = directory / f".{Q4K_FILE}.partial"
    save_file(kept, str(partial), metadata={"format": "q4_k blocks of " + gguf.name})
    os.replace(partial, directory / Q4K_FILE)
    return len(kept)


def _checkpoint_names(reader: GGUFReader, names: set[str]) -> dict[str, str]:
    """The checkpoint's weight names by their GGUF names, through the gguf package's own map for the file's
    architecture and block count (empty for an architecture the package does not know: nothing is taken)."""
    field = reader.fields.get("general.architecture")
    architecture = bytes(field.parts[field.data[0]]).decode() if field else ""
    arch = next((arch for arch in MODEL_ARCH if MODEL_ARCH_NAMES[arch] == architecture), None)
    blocks = reader.fields.get(f"{architecture}.block_count")
    if arch is None or blocks is None:
        return {}
    name_map = get_tensor_name_map(arch, int(blocks.parts[blocks.data[0]][0]))
    mapped = {name: name_map.get_name(name, try_suffixes=(".weight",)) for name in names}
    return {gguf_name: name for name, gguf_name in mapped.items() if gguf_name is not None}
