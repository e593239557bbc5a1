"""Load target and draft models: the embedded default, a hub id, or a save_pretrained directory.

Models are loaded once per process (``load_model`` is memoised) and shared by every caller, so
nothing here or downstream mutates a loaded model. Forward passes go through ``LoadedModel.lock``.

The embedded default and its draft (:mod:`specviz.models.embedded`, :mod:`specviz.models.embedded_draft`) and
the published pair (:mod:`specviz.models.published`) load from directories in the cache.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Callable, NamedTuple

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from specviz.limits import EMBEDDED, EMBEDDED_DRAFT
from specviz.models import hub
from specviz.models.embedded import EMBEDDED_NAME, embedded_model_dir
from specviz.models.embedded_draft import EMBEDDED_DRAFT_NAME, embedded_draft_dir
from specviz.models.profile import choose_kernels
from specviz.models.published import PUBLISHED, fetched, not_fetched_message, published_source
from specviz.runtime.cpu.int4 import int4_not_on
from specviz.runtime.cpu.int4_layers import quantize_int4_model
from specviz.runtime.cpu.int8 import int8_not_on, quantize_int8
from specviz.runtime.cpu.kernel_paths import DEFAULT, INT4, INT8, QUANTISED
from specviz.runtime.cpu.mapped_pages import own_remaining_weights
from specviz.runtime.loaded import LoadedModel
from specviz.runtime.machine import check_memory, resolve_device, share_kv_heads_in_masked_attention, weights_bytes
from specviz.runtime.static_passes import passes_for
from specviz.runtime.vocab_ranking import read_vocab_ranking
from specviz.settings import ModelLoadError, VocabularyMismatchError


class Quantisation(NamedTuple):
    """A quantised precision: what puts a freshly loaded float32 model on it, and why it cannot run on a device (None
    where it can)."""

    apply: Callable[[nn.Module], int]
    not_on: Callable[[torch.device], str | None]

    def runs_on(self, device: torch.device) -> bool:
        return self.not_on(device) is None


QUANTISATIONS = {INT8: Quantisation(quantize_int8, int8_not_on), INT4: Quantisation(quantize_int4_model, int4_not_on)}


def torch_dtype(name: str) -> torch.dtype:
    """A config's precision name ("float32", "bfloat16", "float16") as a torch dtype; "int8" and "int4"
    (quantised matrices, the rest float32: :mod:`specviz.runtime.cpu.int8`, :mod:`specviz.runtime.cpu.int4`) as
    float32."""
    dtype = torch.float32 if name in QUANTISED else getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ModelLoadError(f"Unknown precision {name!r}: use float32, bfloat16, float16, int8 or int4")
    return dtype


def load_location(spec: str) -> tuple[str, str]:
    """(what to load from, display name) for a spec: the embedded pair's cache directories, a published
    model's fetched directory (its hub id where a model hub answers), else the spec itself."""
    if spec == EMBEDDED:
        return str(embedded_model_dir()), EMBEDDED_NAME
    if spec == EMBEDDED_DRAFT:
        return str(embedded_draft_dir()), EMBEDDED_DRAFT_NAME
    if spec in PUBLISHED:
        source = published_source(PUBLISHED[spec], hub.hub_reachable)
        if source is None:
            raise ModelLoadError(not_fetched_message(PUBLISHED[spec]))
        return source
    return spec, spec


def _load_pretrained(source: str, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    offline = not Path(source).is_dir() and not hub.hub_reachable()
    common = dict(trust_remote_code=False, local_files_only=offline)
    try:
        AutoConfig.from_pretrained(source, **common)
    except Exception as exc:  # noqa: BLE001 - any failure here means "no such model"
        if offline:
            raise ModelLoadError(
                f"{source!r} is not a model directory here, and loading it by name needs a model hub, which this "
                f"machine cannot reach. {hub.offline_next_step()}"
            ) from exc
        raise ModelLoadError(
            f"Unknown model {source!r}: it is neither a local model directory nor a model on the model hub "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
        ) from exc
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **common)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, use_safetensors=True, **common)
    except Exception as exc:  # noqa: BLE001
        if offline and isinstance(exc, OSError):  # a partial hub cache: the config is here, the weights are not
            raise ModelLoadError(
                f"{source!r} is only partly in this machine's model-hub cache and the hub cannot "
                f"be reached to fetch the rest. {hub.offline_next_step()}"
            ) from exc
        raise ModelLoadError(f"Could not load model {source!r}: {type(exc).__name__}: {str(exc)[:300]}") from exc
    return model, tokenizer


def load_model(spec: str | None, device: str = "auto", dtype: str = "float32") -> LoadedModel:
    """Load a model spec once per process, device and precision; later calls return the same object
    (however the arguments are spelled). Rules compute every probability in float32 whatever ``dtype``
    the weights have."""
    spec = (spec or "").strip()
    if spec in PUBLISHED and not fetched(PUBLISHED[spec]):
        load_location(spec)  # not fetched and no hub: the message names the command, whatever was loaded before
    return _load_model_once(*model_key(spec, device, dtype))


def model_key(spec: str | None, device: str, dtype: str) -> tuple[str, str, str]:
    """A loaded model's key however its arguments are spelled: "auto" and "cpu" on a CPU machine are one device."""
    return (spec or "").strip(), str(resolve_device(device)), dtype


MODELS_KEPT = 8  # models held however long nobody uses them (a model in use stays loaded in any case)
_kept: OrderedDict[tuple[str, str, str], LoadedModel] = OrderedDict()  # the newest, least recently used first
_live: weakref.WeakValueDictionary[tuple[str, str, str], LoadedModel] = weakref.WeakValueDictionary()  # all alive
_cache_lock = threading.Lock()


def forget_loaded_models(keep: Iterable[LoadedModel] = ()) -> None:
    """Stop holding this process's loaded models other than ``keep`` (a command that loads one precision after
    another frees each in turn; the server keeps the models of the pairs it keeps). A model something still uses
    stays loaded, and a later :func:`load_model` finds it instead of loading a second copy."""
    kept = {id(model) for model in keep}
    with _cache_lock:
        for key in [key for key, model in _kept.items() if id(model) not in kept]:
            del _kept[key]


def bytes_to_load(spec: str | None, device: str, dtype: str) -> tuple[int, int]:
    """About the memory loading a model spec takes: (at its peak, kept once loaded). In its stored precision the
    file's pages become its weights (peak = kept = its files' bytes); in another, its files are mapped while the
    converted copy is made, and only the copy is kept (int8 counted at two bytes a weight: its matrices take one,
    its embedding stays float32). (0, 0) when it is loaded already or its size is not known here (a hub id)."""
    key = model_key(spec, device, dtype)
    with _cache_lock:
        if key in _live:
            return 0, 0
    try:
        source = Path(load_location(key[0])[0])
    except ModelLoadError:
        return 0, 0
    if not source.is_dir():
        return 0, 0
    stored, converted = (
        weights_bytes(source),
        weights_bytes(source, torch.float16 if dtype in QUANTISED else torch_dtype(dtype)),
    )
    return (stored, stored) if converted == stored and dtype not in QUANTISED else (stored + converted, converted)


def _load_model_once(spec: str, device: str, dtype: str) -> LoadedModel:
    key = (spec, device, dtype)
    with _cache_lock:
        loaded = _kept.get(key) or _live.get(key)
        if loaded is not None:
            _kept[key] = loaded
            _kept.move_to_end(key)
            return loaded
    loaded = _build_model(spec, device, dtype)
    with _cache_lock:
        loaded = _live.setdefault(key, loaded)  # two threads may both build a model: both get the first one
        _kept[key] = loaded
        while len(_kept) > MODELS_KEPT:
            _kept.popitem(last=False)
    return loaded


def _build_model(spec: str, device: str, dtype: str) -> LoadedModel:
    if not spec:
        raise ModelLoadError("No model given")
    resolved = resolve_device(device)
    share_kv_heads_in_masked_attention(resolved)
    source, name = load_location(spec)
    if dtype in QUANTISATIONS and (reason := QUANTISATIONS[dtype].not_on(resolved)):
        raise ModelLoadError(reason)
    check_memory(source, torch_dtype(dtype), resolved)
    model, tokenizer = _load_pretrained(source, torch_dtype(dtype))
    model.to(resolved).eval()  # type: ignore[arg-type]  # functools.wraps on PreTrainedModel.to: its stub loses self
    model.requires_grad_(False)
    if dtype in QUANTISATIONS:  # quantised from the float32 weights, each scale from the exact weights
        QUANTISATIONS[dtype].apply(model)
    ranking = read_vocab_ranking(Path(source)) if Path(source).is_dir() else None
    loaded = LoadedModel(
        spec=spec,
        name=name,
        model=model,
        tokenizer=tokenizer,
        device=resolved,
        vocab_ranking=ranking,
        precision=dtype,
        passes=passes_for(resolved, model),  # a GPU's: over a static cache, captured as CUDA graphs
    )
    if choose_kernels(loaded) != DEFAULT:  # before the model is shared: measured once per machine, then cached
        own_remaining_weights(model)
    return loaded


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
