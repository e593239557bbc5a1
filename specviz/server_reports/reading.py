"""Read what a serving engine reported about its speculative decoding, pasted or uploaded, into one
:class:`~specviz.server_reports.record.EngineReport` whatever the engine: the engine and its format are recognised
from the text (each format's marker), and text that is none of them, cut short or inconsistent is a ConfigError
saying what was expected. The readers: engine_vllm, engine_sglang, engine_llamacpp; the formats and their sources:
docs/engine_report.md. No torch, no streamlit."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specviz.server_reports import llamacpp, sglang, vllm
from specviz.server_reports.record import EngineReport
from specviz.settings import ConfigError

__all__ = ["ENGINES", "EngineReport", "read_engine_report"]

# what each engine's text looks like, for the messages
ENGINES = {
    "vllm": "vLLM's /metrics text (vllm:spec_decode_...), its 'SpecDecoding metrics:' log line or a response's "
    "metrics.speculative_decoding JSON (summary, or detailed with per_step_accepted)",
    "sglang": "SGLang's 'Decode batch' log line (accept len, accept rate), its /metrics gauges "
    "(sglang:spec_accept_...) or a /generate response's meta_info (spec_verify_ct)",
    "llama.cpp": "llama.cpp's 'statistics' or 'draft acceptance' server log line, the llama-speculative summary "
    "(n_drafted, n_accept), a server response's timings (draft_n, draft_n_accepted) or its /metrics text "
    "(llamacpp:spec_decode_...)",
}


@dataclass(frozen=True)
class Format:
    """One output of one engine: the marker that recognises it and its reader."""

    engine: str
    name: str
    marks: Callable[[str], bool]
    read: Callable[[Any], EngineReport]


TEXT_FORMATS = (
    Format("vllm", "/metrics text", lambda text: vllm.PREFIX in text, vllm.from_prometheus),
    Format("llama.cpp", "/metrics text", lambda text: llamacpp.PREFIX in text, llamacpp.from_prometheus),
    Format("vllm", "SpecDecoding metrics log", lambda text: vllm.LOG_MARK in text, vllm.from_log),
    Format("sglang", "/metrics text", lambda text: sglang.PREFIX in text, sglang.from_prometheus),
    Format("sglang", "decode log", lambda text: sglang.LOG_MARK in text, sglang.from_decode_log),
    Format("llama.cpp", "statistics log", lambda text: llamacpp.STATS_MARK in text, llamacpp.from_statistics),
    Format(
        "llama.cpp", "print_timing log", lambda text: bool(llamacpp.TIMING.search(text)), llamacpp.from_print_timing
    ),
    Format("llama.cpp", "llama-speculative summary", lambda text: "n_drafted" in text, llamacpp.from_example),
)
JSON_FORMATS = (
    Format("vllm", "per-step JSON", lambda text: f'"{vllm.STEP_KEYS[0]}"' in text, vllm.from_request_steps),
    Format("sglang", "meta_info JSON", lambda text: f'"{sglang.META_MARK}"' in text, sglang.from_meta_info),
    Format(
        "vllm",
        "per-request JSON",
        lambda text: '"speculative_decoding"' in text or "_histogram" in text,
        vllm.from_request_json,
    ),
    Format(
        "llama.cpp", "server JSON", lambda text: '"timings"' in text or '"draft_n"' in text, llamacpp.from_timings_json
    ),
)


def read_engine_report(text: str, engine: str | None = None) -> EngineReport:
    """The report in ``text``; ``engine`` (a key of :data:`ENGINES`), when given, is the engine the reader expects
    (another engine's text is then a ConfigError saying so)."""
    if engine is not None and engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    text = text.strip()
    expected = ENGINES[engine] if engine else "; ".join(ENGINES.values())
    if not text:
        raise ConfigError(f"Nothing to read: expected {expected}")
    is_json = text[0] == "{" or re.match(r"\[\s*[{\]]", text) is not None  # a log line may open with [time]
    data = parsed_json(text, expected) if is_json else text
    found = next((f for f in (JSON_FORMATS if is_json else TEXT_FORMATS) if f.marks(text)), None)
    if found is None:
        raise ConfigError(f"This is not a speculative decoding report this app reads: expected {expected}")
    if engine is not None and found.engine != engine:
        raise ConfigError(f"Expected {expected}; this text reads as {found.engine}'s {found.name}")
    try:
        return found.read(data)
    except RecursionError:
        raise ConfigError(f"This JSON is nested too deeply to be a report; expected {expected}") from None


def parsed_json(text: str, expected: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise ConfigError(f"This JSON is nested too deeply to be a report; expected {expected}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"This JSON does not parse at line {exc.lineno}, column {exc.colno} ({exc.msg}: a paste cut short?); "
            f"expected {expected}"
        ) from None
