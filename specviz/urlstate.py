"""The app's state in URL query parameters: a copied link reopens the same trace.

Pure functions over a ``{name: str}`` mapping (no streamlit): parse every known parameter, keep
the valid ones, and explain each value that was malformed or out of range (it falls back to the
default). Only non-default values are written, so shared links stay short.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from .config import ConfigError, DecodeConfig

# Settable from a URL. The device and the recorded top-N are the server's business, not a link's.
# Applied in this order, each checked with those before it: the draft comes before the target, so a
# link naming both a new target and its draft is valid at every step.
URL_FIELDS = ("draft", "drafter", "target", "draft_vocab", "rule", "gamma", "beta", "tau", "temperature", "top_k", "top_p",
              "seed", "max_new_tokens", "chat_template", "skip_layers", "exit_threshold", "ngram_max", "tree_mode",
              "branching", "tree_depth", "beam_width")
PROMPT_CHARS_MAX = 4000


@dataclasses.dataclass(frozen=True)
class UrlState:
    config: DecodeConfig
    prompt: str | None  # None: the parameter is absent
    round: int  # 1-based round to show
    messages: tuple[str, ...]  # one line per value that was ignored, and why


def _parse(name: str, raw: str, default):
    if name == "skip_layers":
        return tuple(int(x) for x in raw.split(",") if x.strip()) if raw.strip() else None
    if name == "chat_template":
        if raw.lower() not in ("1", "0", "true", "false"):
            raise ValueError
        return raw.lower() in ("1", "true")
    if name == "draft":
        return raw or None
    if name == "draft_vocab":
        return None if raw.strip().lower() in ("", "auto") else int(raw)
    if isinstance(default, bool):
        raise ValueError
    if isinstance(default, int):
        return int(raw)
    if isinstance(default, float):
        return float(raw)
    return raw


def _default_of(name: str, defaults: DecodeConfig):
    value = getattr(defaults, name)
    if value is None:  # typed by the field: skip_layers / draft / draft_vocab
        return {"draft": "", "draft_vocab": 0}.get(name, ())
    return value


def parse_query(params: Mapping[str, str], defaults: DecodeConfig) -> UrlState:
    """Read a URL's query parameters into a validated config; bad values fall back with a message."""
    config, messages = defaults, []
    for name in URL_FIELDS:
        if name not in params:
            continue
        raw = str(params[name])
        try:
            candidate = config.replace(**{name: _parse(name, raw, _default_of(name, defaults))})
            candidate.validated()
        except (ValueError, ConfigError) as exc:
            reason = str(exc) if isinstance(exc, ConfigError) else "malformed"
            messages.append(f"URL parameter {name}={raw[:40]!r} ignored ({reason}); using {getattr(defaults, name)!r}")
            continue
        config = candidate
    prompt = params.get("prompt")
    if prompt is not None and len(prompt) > PROMPT_CHARS_MAX:
        messages.append(f"URL parameter prompt is {len(prompt)} characters long; it was cut to {PROMPT_CHARS_MAX}")
        prompt = prompt[:PROMPT_CHARS_MAX]
    round_index = 1
    if "round" in params:
        try:
            round_index = int(params["round"])
            if round_index < 1:
                raise ValueError
        except ValueError:
            messages.append(f"URL parameter round={str(params['round'])[:20]!r} ignored (must be a positive integer)")
            round_index = 1
    return UrlState(config, prompt, round_index, tuple(messages))


def to_query(config: DecodeConfig, prompt: str, round_index: int, defaults: DecodeConfig) -> dict[str, str]:
    """The query parameters that reproduce ``config``, ``prompt`` and the shown round."""
    query: dict[str, str] = {}
    for name in URL_FIELDS:
        value = getattr(config, name)
        if value == getattr(defaults, name):
            continue
        if name == "skip_layers":
            query[name] = ",".join(str(i) for i in value) if value is not None else ""
        elif isinstance(value, bool):
            query[name] = "1" if value else "0"
        else:
            query[name] = ("auto" if name == "draft_vocab" else "") if value is None else str(value)
    query["prompt"] = prompt
    if round_index > 1:
        query["round"] = str(round_index)
    return query
