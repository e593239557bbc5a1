"""llama.cpp's reports of speculative decoding, read into an :class:`EngineReport` (formats and their sources:
docs/engine_report.md): the ``statistics <implementation>:`` line of common/speculative.cpp, the server's
``print_timing`` line (``draft acceptance = ...``), the summary of ``llama-speculative`` / ``llama-speculative-simple``
(``n_drafted``, ``n_accept``), the server's response ``timings.draft_n`` / ``draft_n_accepted`` and its ``/metrics``
counters in vLLM's names (``llamacpp:spec_decode_...``). No torch."""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from specviz.server_reports.record import (
    FLOAT,
    INT,
    EngineReport,
    count,
    field,
    length_of,
    objects_with,
    rates,
    report,
    required,
    share,
    spec_decode_counters,
)
from specviz.settings import ConfigError

PREFIX = "llamacpp:spec_decode_"
STATS_MARK = "#gen tokens"
TIMING = re.compile(r"draft acceptance(?: rate)? = ")
TIMING_COUNTS = re.compile(r"\s*(-?[\d.]+)\s*\(\s*(-?\d+) accepted\s*/\s*(-?\d+) generated\)")
EXAMPLE = {name: re.compile(rf"\b{name}\s*=\s*(-?\d+)\b") for name in ("n_draft", "n_drafted", "n_accept")}
LIST = r"\(([^)]*)\)"


class Drafting(NamedTuple):
    """One implementation's cumulative counts on its ``statistics`` line."""

    drafts: int  # verification steps
    drafted: int
    accepted: int
    per_position: tuple[float, ...] | None

    def at(self, position: int) -> float:
        """Its rate at a 0-based position (0 past its longest draft: no draft accepted a token there)."""
        return self.per_position[position] if self.per_position and position < len(self.per_position) else 0.0


def from_statistics(text: str) -> EngineReport:
    """The last ``statistics`` line of each drafting implementation (its counts run over the server's life): drafts,
    drafted and accepted tokens summed over the implementations, their per-position rates weighed by their drafts."""
    last: dict[str, Drafting] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if STATS_MARK in line:
            name = re.search(r"statistics\s+(\S+):", line)
            last[name.group(1) if name else str(n)] = _statistics(line, f"llama.cpp's statistics line {n}")
    drafting = [found for found in last.values() if found.drafts]
    if not drafting:
        raise ConfigError("llama.cpp's statistics lines report no drafts: speculative decoding never ran")
    drafts = sum(found.drafts for found in drafting)
    k = max((len(found.per_position or ()) for found in drafting), default=0)
    per_position = None
    if all(found.per_position for found in drafting):
        per_position = tuple(sum(found.drafts * found.at(i) for found in drafting) / drafts for i in range(k))
    return report(
        "llama.cpp",
        "speculative statistics",
        accepted=sum(found.accepted for found in drafting),
        draft_tokens=sum(found.drafted for found in drafting),
        drafts=drafts,
        per_position=per_position,
        draft_length=k or None,
    )


def _statistics(line: str, what: str) -> Drafting:
    """One line's counts. Its verification steps are the accept calls, the last of ``#calls(b,g,a)`` (the mean
    acceptance length and the per-position rates are over them); ``#gen drafts`` where a build prints no calls."""
    values = [required(field(line, f"{label} =", INT, what), label, what) for label in STATS_LABELS]
    drafts, accepted_drafts, drafted, accepted = (count(value, what) for value in values)
    calls = field(line, "#calls(b,g,a) =", r"(-?\d+\s+-?\d+\s+-?\d+)", what)
    steps = count(calls.split()[2], what) if calls else drafts
    if accepted_drafts > drafts or accepted > drafted:
        raise ConfigError(f"{what}: more accepted than generated ({accepted_drafts}/{drafts}, {accepted}/{drafted})")
    listed = field(line, "#acc rate/pos =", LIST, what)
    printed = field(line, "#mean acc len =", FLOAT, what)
    if steps and printed is not None:
        length_of(accepted, steps, float(printed), what)
    return Drafting(steps, drafted, accepted, rates(listed, what) if listed else None)


STATS_LABELS = ("#gen drafts", "#acc drafts", STATS_MARK, "#acc tokens")


def from_print_timing(text: str) -> EngineReport:
    """The last request's ``draft acceptance`` line: accepted and generated draft tokens, the mean acceptance length
    (``mean acceptance length =`` since PR #24536, ``mean len =`` later) and the rates per position (on the line, or
    on the ``acc per pos =`` line after it); the server prints no draft count."""
    lines = text.splitlines()
    at, start = max((n, found.end()) for n, line in enumerate(lines) if (found := TIMING.search(line)))
    line, what = lines[at], f"llama.cpp's print_timing line {at + 1}"
    counts = TIMING_COUNTS.match(line[start:])
    if counts is None:
        raise ConfigError(f"{what}: expected 'draft acceptance = R (N accepted / M generated)' (a paste cut short?)")
    rate, accepted, drafted = share(counts[1], what), count(counts[2], what), count(counts[3], what)
    printed = field(line, "mean acceptance length =", FLOAT, what) or field(line, "mean len =", FLOAT, what)
    listed = field(line, "acceptance rate per position =", LIST, what)
    follows = [later for later in lines[at + 1 :] if "acc per pos =" in later][:1]
    if listed is None and follows:
        listed = field(follows[0], "acc per pos =", LIST, what)
    per_position = rates(listed, what) if listed else None
    if drafted and abs(rate - accepted / drafted) > 6e-6:
        raise ConfigError(f"{what}: draft acceptance {rate} is not {accepted} accepted / {drafted} generated")
    return report(
        "llama.cpp",
        "server print_timing",
        accepted=accepted,
        draft_tokens=drafted,
        printed_length=float(printed) if printed else None,
        per_position=per_position,
        draft_length=len(per_position) if per_position else None,
    )


def from_example(text: str) -> EngineReport:
    """The summary ``llama-speculative`` and ``llama-speculative-simple`` print: n_drafted tokens, n_accept of them
    accepted, n_draft the most a draft may hold; ``accept = P%`` checked against them."""
    what = "llama.cpp's llama-speculative summary"
    found = {name: match[1] for name, pattern in EXAMPLE.items() if (match := pattern.search(text))}
    drafted = count(required(found.get("n_drafted"), "n_drafted = N", what), what)
    accepted = count(required(found.get("n_accept"), "n_accept = N", what), what)
    percent = re.search(r"\baccept\s*=\s*" + FLOAT + "%", text)
    if percent and drafted and abs(float(percent[1]) - 100 * accepted / drafted) > 0.0006:
        raise ConfigError(f"{what}: accept = {percent[1]}% is not {accepted} / {drafted}")
    k = count(found["n_draft"], what) if "n_draft" in found else None
    return report("llama.cpp", "llama-speculative summary", accepted=accepted, draft_tokens=drafted, draft_length=k)


def from_timings_json(data: Any) -> EngineReport:
    """The last ``timings`` object with ``draft_n`` (the server writes it only when it drafted) in a response."""
    what = "llama.cpp's timings"
    found = objects_with(data, "draft_n")
    if not found:
        if objects_with(data, "timings"):
            raise ConfigError(
                f"{what} carry no draft_n: the server drafted nothing for this request (it writes draft_n only "
                "when it drafted; was it started with --model-draft?)"
            )
        raise ConfigError(f"{what}: expected a response with timings.draft_n and timings.draft_n_accepted")
    timings = found[-1]
    if "draft_n_accepted" not in timings:
        raise ConfigError(f"{what}: draft_n without draft_n_accepted (a paste cut short?)")
    accepted, drafted = count(timings["draft_n_accepted"], what), count(timings["draft_n"], what)
    return report("llama.cpp", "server JSON timings", accepted=accepted, draft_tokens=drafted)


def from_prometheus(text: str) -> EngineReport:
    """llama-server's ``/metrics`` (``--metrics``; tools/server/server-task.cpp, ``server_task_result_metrics::
    to_metrics``, since PR #26389): the counters ``llamacpp:spec_decode_num_draft_tokens_total``,
    ``..._num_accepted_tokens_total``, ``..._num_drafts_total`` (verification steps) and, once a speculative request
    has finished, ``..._num_accepted_tokens_per_pos_total{position="i"}`` for i < the draft's most tokens, counted
    as vLLM counts them. The three totals are written as C++ doubles, 6 significant digits; the positions exactly."""
    return spec_decode_counters(text, PREFIX, "llama.cpp", "llama.cpp's /metrics text", digits=6)
