"""The embedded draft model: SmolLM2-135M cut to a few of its own layers, distilled from itself.

Shipped as ``specviz/weights/smollm2-135m-draft.safetensors``: the draft's decoder layers (each matrix
as the int8 rows of its change from the target's layer it was cut from, ``stored_tensors``), its norms
(float16) and ``vocab_order``, every token id ranked by how often the target generated it in the
training text (FR-Spec's frequency-ranked draft vocabulary, Zhao et al. 2025, arXiv 2502.14856). Its
manifest ``smollm2-135m-draft.json`` says how it was made (command, seed, steps, data, loss, measured
acceptance). The embedding, the output head tied to it and the start layers are the target's own,
read at load time, which keeps the shipped file small.

On first use the draft is materialised as a standard ``save_pretrained`` directory in the cache
(``embedded_draft_dir``), so transformers' own ``generate(assistant_model=...)`` can load exactly the
same draft, and the ranking sits beside it in ``vocab_order.safetensors``.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import (
    AutoConfig,
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedConfig,
    PreTrainedModel,
)

from specviz import WEIGHTS_DIR
from specviz.cache import cache_root, materialise
from specviz.models.embedded import embedded_model_dir
from specviz.runtime.vocab_ranking import write_vocab_ranking
from specviz.settings import ModelLoadError

EMBEDDED_DRAFT_NAME = "SmolLM2-135M draft (embedded, distilled)"
WEIGHTS_FILE = WEIGHTS_DIR / "smollm2-135m-draft.safetensors"
MANIFEST_FILE = WEIGHTS_FILE.with_suffix(".json")
SHARED_WEIGHTS = ("model.embed_tokens.weight", "lm_head.weight")  # the target's, never shipped


def draft_config(config: PreTrainedConfig, layers: int) -> PreTrainedConfig:
    """The target's config with ``layers`` decoder layers; the GGUF origin of its weights does not apply."""
    config.num_hidden_layers = layers
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    return config


def layer_state(target_weights: dict[str, torch.Tensor], layer_ids: list[int]) -> dict[str, torch.Tensor]:
    """The target's decoder layers ``layer_ids`` renamed to the draft's numbering 0, 1, ... (in order)."""
    state = {}
    for new, old in enumerate(layer_ids):
        prefix = f"model.layers.{old}."
        state.update(
            {
                f"model.layers.{new}.{name[len(prefix) :]}": value
                for name, value in target_weights.items()
                if name.startswith(prefix)
            }
        )
    return state


def cut_model(target: PreTrainedModel, layer_ids: list[int]) -> LlamaForCausalLM:
    """A new Llama made of the target's embedding, the decoder layers ``layer_ids`` (in order) and its
    final norm: the draft's starting point before distillation (a layer subset of the target)."""
    config = draft_config(copy.deepcopy(target.config), len(layer_ids))
    assert isinstance(config, LlamaConfig), "a draft is cut from a Llama target (the embedded SmolLM2)"
    draft = LlamaForCausalLM(config)
    target_weights = target.state_dict()
    state = {name: value for name, value in target_weights.items() if not name.startswith("model.layers.")}
    draft.load_state_dict({**state, **layer_state(target_weights, layer_ids)}, strict=False)
    draft.tie_weights()
    # transformers wraps PreTrainedModel.to in functools.wraps(nn.Module.to), whose stub loses the bound self
    return draft.to(device=target.device, dtype=target.dtype).eval()  # type: ignore[call-arg]


ROW_SCALE = ".row_scale"  # beside an int8 matrix in the shipped file: one float32 scale per output row


def quantised_rows(matrix: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: m[i, j] ~ s[i] * n[i, j] with s[i] = max_j |m[i, j]| / 127 and n = round(m / s)
    in [-127, 127] (absmax quantisation, as in LLM.int8(), Dettmers et al. 2022, arXiv 2208.07339, Sec. 3.1,
    with one scale per output row). The rounding error is at most s[i] / 2 per entry."""
    matrix = matrix.detach().float().cpu()
    scale = matrix.abs().amax(dim=1).clamp_min(1e-12) / 127.0
    return torch.round(matrix / scale[:, None]).to(torch.int8).contiguous(), scale.contiguous()


def stored_tensors(draft: PreTrainedModel, start: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The draft's own weights as shipped. Every matrix is stored as the int8 rows of its change from
    ``start``, the target's layer it was cut from (``layer_state``): training moves a matrix by a fraction
    of its norm, so rounding the change costs far less than rounding the matrix itself.
    Vectors (the norms) are float16. The target's embedding and tied head are left out: the loader
    reads them, and the start layers, from the target."""
    tensors = {}
    for name, value in draft.state_dict().items():
        if name in SHARED_WEIGHTS:
            continue
        if value.ndim == 2:
            tensors[name], tensors[name + ROW_SCALE] = quantised_rows(value - start[name].to(value))
        else:
            tensors[name] = value.detach().to(torch.float16).contiguous().cpu()
    return tensors


def restored_state(tensors: dict[str, torch.Tensor], start: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The float32 state dict that ``stored_tensors`` encodes: start + int8 rows x their scales for a
    matrix, the value itself for anything stored without a scale."""

    def restored(name: str, value: torch.Tensor) -> torch.Tensor:
        if name + ROW_SCALE not in tensors:
            return value.float()
        return start[name].float().cpu() + value.float() * tensors[name + ROW_SCALE][:, None]

    return {name: restored(name, value) for name, value in tensors.items() if not name.endswith(ROW_SCALE)}


def save_shipped(
    tensors: dict[str, torch.Tensor],
    layers_from_target: list[int],
    vocab_order: torch.Tensor,
    manifest: dict,
    path: Path = WEIGHTS_FILE,
) -> None:
    """Write the draft's ``stored_tensors``, its token ranking and the manifest; the manifest's
    ``draft_vocab`` is the head size K the engine uses by default."""
    metadata = {
        "num_hidden_layers": str(len(layers_from_target)),
        "layers_from_target": ",".join(map(str, layers_from_target)),
        "draft_vocab": str(manifest.get("draft_vocab", 0)),
        "format": "pt",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({**tensors, "vocab_order": vocab_order.to(torch.int32).contiguous()}, str(path), metadata=metadata)
    path.with_suffix(".json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def embedded_draft_dir() -> Path:
    """The shipped draft as a ``save_pretrained`` directory in the cache, made on first use.

    The directory's name carries a digest of the shipped file, so retrained weights never meet a
    stale copy.
    """
    if not WEIGHTS_FILE.is_file():
        raise ModelLoadError(
            f"The embedded draft's weights {WEIGHTS_FILE} are missing: train them with `python -m specviz train-draft`"
        )
    base = embedded_model_dir()
    with safe_open(str(WEIGHTS_FILE), framework="pt") as f:
        metadata = f.metadata()
    layers, draft_vocab = int(metadata["num_hidden_layers"]), metadata.get("draft_vocab", "0")
    layers_from_target = [int(i) for i in metadata.get("layers_from_target", "").split(",") if i]
    if len(layers_from_target) != layers:
        raise ModelLoadError(
            f"The embedded draft's weights {WEIGHTS_FILE} do not say which {layers} target layers "
            "their matrices start from (metadata 'layers_from_target'): retrain them with "
            "`python -m specviz train-draft`"
        )

    def write(staging: Path) -> None:
        stored = load_file(str(WEIGHTS_FILE))
        vocab_order = stored.pop("vocab_order")
        with safe_open(str(base / "model.safetensors"), framework="pt") as f:  # tied: stored under either name
            shared = next(name for name in SHARED_WEIGHTS if name in f.keys())
            embedding = f.get_tensor(shared)
            start_layers = tuple(f"model.layers.{i}." for i in layers_from_target)
            target_layers = {name: f.get_tensor(name) for name in f.keys() if name.startswith(start_layers)}
        shipped = restored_state(stored, layer_state(target_layers, layers_from_target))
        shipped["model.embed_tokens.weight"] = embedding
        config = draft_config(AutoConfig.from_pretrained(base), layers)
        save_file(
            {name: value.contiguous() for name, value in shipped.items()},
            str(staging / "model.safetensors"),
            metadata={"format": "pt"},
        )
        write_vocab_ranking(staging, vocab_order, int(draft_vocab))
        config.save_pretrained(staging)
        GenerationConfig.from_pretrained(base).save_pretrained(staging)
        AutoTokenizer.from_pretrained(base).save_pretrained(staging)

    return materialise(cache_root() / f"smollm2-135m-draft-{_digest(WEIGHTS_FILE)}", write)
