"""What a serving engine reported about its speculative decoding, in one shape whatever the engine, and the checks
every reader shares. The formats each reader follows are in docs/engine_report.md. No torch, no streamlit.

The counts are vLLM's (vllm/v1/spec_decode/metrics.py), which llama.cpp adopted (PR #24536): a *draft* is one
drafting round verified by one target pass, ``accepted / draft_tokens`` is the acceptance rate, ``1 + accepted /
drafts`` the mean acceptance length (the bonus token included: tokens per target pass) and ``per_position[i]`` the
share of drafts whose token at position i + 1 was accepted (so it can only fall with i).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from specviz.settings import ConfigError

INT = r"(-?\d+)"
FLOAT = r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"


@dataclass(frozen=True)
class EngineReport:
    """One engine's numbers, None where its text does not report them."""

    engine: str  # vllm | sglang | llama.cpp
    source: str  # which of the engine's outputs was read
    drafts: int | None  # drafting rounds (target passes that verified a draft)
    draft_tokens: int | None
    accepted_tokens: int | None
    acceptance_rate: float | None  # accepted / drafted tokens
    mean_acceptance_length: float | None  # tokens per target pass, the bonus token included
    per_position: tuple[float, ...] | None  # share of drafts whose token at position 1, 2, ... was accepted
    draft_length: int | None  # the tokens a draft holds at most (k): the engine's setting or its positions

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "per_position": None if self.per_position is None else [*self.per_position]}


def count(value: object, what: str) -> int:
    """A count as an int (Prometheus writes ``12.0``); ConfigError for anything else or a negative one."""
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or number != int(number):
        raise ConfigError(f"{what} should be a whole number of tokens or drafts; got {value!r}")
    if number < 0:
        raise ConfigError(f"{what} cannot be negative; got {value!r}")
    return int(number)


def number(value: object, what: str) -> float:
    """A finite number (ConfigError otherwise)."""
    try:
        found = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{what} should be a number; got {value!r}") from None
    if not math.isfinite(found) or isinstance(value, bool):
        raise ConfigError(f"{what} should be a finite number; got {value!r}")
    return found


def share(value: object, what: str) -> float:
    """A rate in [0, 1] (ConfigError otherwise)."""
    rate = number(value, what)
    if not 0.0 <= rate <= 1.0:
        raise ConfigError(f"{what} should be between 0 and 1; got {value!r}")
    return rate


def rates(text: str, what: str) -> tuple[float, ...]:
    """A comma-separated list of rates, as the engines print their per-position acceptance."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ConfigError(f"{what}: the list of rates is empty")
    return tuple(share(item, f"{what} (position {i})") for i, item in enumerate(items, 1))


def counts(values: object, what: str) -> list[int]:
    """A JSON list of counts (ConfigError for anything else)."""
    if not isinstance(values, list):
        raise ConfigError(f"{what} should be a list of counts; got {values!r}")
    return [count(n, f"{what}[{j}]") for j, n in enumerate(values)]


def reached(histogram: Counter[int], k: int) -> tuple[float, ...] | None:
    """Per position i = 1..k, the share of verification steps that accepted at least i drafted tokens, from a
    histogram of the steps by the tokens each accepted (vLLM's per-position rate: a step that accepted n counts at
    positions 1..n); None without steps."""
    steps = histogram.total()
    return tuple(sum(n for j, n in histogram.items() if j >= i) / steps for i in range(1, k + 1)) if steps else None


def field(text: str, label: str, value: str, what: str) -> str | None:
    """The value printed after ``label`` in ``text`` (``value``: a regex with one group); None where the label is
    absent; ConfigError where the label is there without its value (a paste cut inside the line)."""
    at = text.find(label)
    if at < 0:
        return None
    found = re.match(r"\s*" + value, text[at + len(label) :])
    if found is None:
        raise ConfigError(f"{what}: '{label.strip()}' is not followed by its value (a paste cut short?)")
    return found.group(1)


def required(value: str | None, label: str, what: str) -> str:
    if value is None:
        raise ConfigError(f"{what}: expected '{label.strip()}' in it (a paste cut short?)")
    return value


def report(
    engine: str,
    source: str,
    *,
    accepted: int | None,
    draft_tokens: int | None,
    drafts: int | None = None,
    printed_length: float | None = None,
    per_position: tuple[float, ...] | None = None,
    draft_length: int | None = None,
    printed_rate: float | None = None,
) -> EngineReport:
    """The record from what an engine printed, its numbers checked against each other: the acceptance rate and
    the mean acceptance length are computed from the counts where the counts are there (the printed ones must
    agree with them), the per-position rates must add up to the mean acceptance length minus 1."""
    what = f"{engine}'s {source}"
    rate: float | None = printed_rate
    if accepted is not None and draft_tokens is not None:
        if draft_tokens == 0:
            raise ConfigError(f"{what} reports no drafted tokens: speculative decoding never ran")
        if accepted > draft_tokens:
            raise ConfigError(f"{what}: {accepted} accepted tokens out of {draft_tokens} drafted is impossible")
        rate = accepted / draft_tokens
    length = printed_length if drafts is None or accepted is None else length_of(accepted, drafts, printed_length, what)
    if rate is None and length is None:
        raise ConfigError(f"{what}: expected accepted and drafted tokens, an acceptance rate or length")
    if rate is not None and not 0 <= rate <= 1:
        raise ConfigError(f"{what}: an acceptance rate of {rate} is not between 0 and 1")
    if length is not None and length < 1:
        raise ConfigError(f"{what}: a mean acceptance length below 1 ({length}) is impossible")
    if per_position is not None:
        agree_with_length(per_position, length, what)
    return EngineReport(engine, source, drafts, draft_tokens, accepted, rate, length, per_position, draft_length)


def length_of(accepted: int, drafts: int, printed: float | None, what: str) -> float:
    """The mean acceptance length 1 + accepted / drafts, the one the engine printed (to 2 decimals) checked
    against it."""
    if drafts == 0:
        raise ConfigError(f"{what} reports no drafts: speculative decoding never ran")
    length = 1 + accepted / drafts
    if printed is not None and abs(printed - length) > 0.006:
        raise ConfigError(
            f"{what}: the mean acceptance length {printed} does not match 1 + {accepted} accepted / {drafts} "
            f"drafts = {length:.3f}"
        )
    return length


def agree_with_length(per_position: tuple[float, ...], length: float | None, what: str) -> None:
    """Accepted tokens per draft are the per-position rates summed (each accepted token sits at one position), so
    they must equal the mean acceptance length minus the bonus token, to the printed decimals."""
    if length is None:
        return
    total = sum(per_position)
    if abs(total - (length - 1)) > 0.0005 * len(per_position) + 0.006:
        raise ConfigError(
            f"{what}: the per-position rates add up to {total:.3f} accepted tokens per draft, but the mean "
            f"acceptance length says {length - 1:.3f} (a list cut short?)"
        )


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def prometheus_samples(text: str, prefix: str, what: str) -> list[tuple[str, dict[str, str], str]]:
    """(name, labels, value) of each sample in a Prometheus text exposition whose name starts with ``prefix``
    (comments and other metrics skipped); ConfigError for such a line that is not a whole sample."""
    samples = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line.startswith(prefix):
            continue
        sample = SAMPLE.match(line)
        if sample is None:
            raise ConfigError(f"{what}: line {number} is not a whole sample (a paste cut short?): {line[:90]}")
        name, labels, value = sample.groups()
        samples.append((name, dict(LABEL.findall(labels or "")), value))
    return samples


SPEC_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos")


def spec_decode_counters(text: str, prefix: str, engine: str, what: str, digits: int | None = None) -> EngineReport:
    """vLLM's four spec-decode counters under ``prefix`` (``vllm:spec_decode_``, or ``llamacpp:spec_decode_`` where
    llama-server exports them in vLLM's names), with or without ``_total`` (``_created`` skipped), summed over their
    label sets; per position by its ``position`` label, 0 first. ``digits``: the significant digits the engine prints
    a count with (llama-server's C++ stream prints 6: ``1.23457e+06``), within which the per-position counters must
    add up to the accepted tokens (exactly where None)."""
    totals: Counter[str] = Counter()
    per_pos: Counter[int] = Counter()
    for name, labels, value in prometheus_samples(text, prefix, what):
        base = name[len(prefix) :].removesuffix("_total")
        if base not in SPEC_COUNTERS:
            continue
        totals[base] += (n := count(value, f"{what}: {name}"))
        if base == "num_accepted_tokens_per_pos":
            per_pos[count(labels.get("position"), f"{what}: the position label of {name}")] += n
    missing = [f"{prefix}{name}_total" for name in SPEC_COUNTERS[1:3] if name not in totals]
    if missing:
        raise ConfigError(f"{what}: expected {' and '.join(missing)} in it (a paste cut short?)")
    drafts = totals["num_drafts"] if "num_drafts" in totals else None
    accepted, positions = totals["num_accepted_tokens"], None
    if per_pos:
        if sorted(per_pos) != list(range(len(per_pos))):
            raise ConfigError(f"{what}: per-position counters for positions {sorted(per_pos)}; expected 0, 1, 2, ...")
        rounding = (
            0.0 if digits is None or not accepted else 0.5 * 10 ** (math.floor(math.log10(accepted)) - digits + 1)
        )
        if abs(per_pos.total() - accepted) > rounding:
            raise ConfigError(
                f"{what}: the per-position counters add up to {per_pos.total()} accepted tokens, "
                f"num_accepted_tokens says {accepted}"
            )
        positions = tuple(per_pos[i] / drafts for i in range(len(per_pos))) if drafts else None
    return report(
        engine,
        "Prometheus /metrics",
        accepted=accepted,
        draft_tokens=totals["num_draft_tokens"],
        drafts=drafts,
        per_position=positions,
        draft_length=len(per_pos) or None,
    )


def objects_with(data: Any, key: str) -> list[dict[str, Any]]:
    """Every JSON object in ``data`` (nested anywhere) that has ``key``."""
    if isinstance(data, dict):
        found = [data] if key in data else []
        return found + [inner for value in data.values() for inner in objects_with(value, key)]
    if isinstance(data, list):
        return [inner for value in data for inner in objects_with(value, key)]
    return []
