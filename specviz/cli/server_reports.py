"""``python -m specviz engine-report FILE``: what a serving engine (vLLM, SGLang, llama.cpp) reported about its
speculative decoding, read into one shape (``--json``) or explained against the theory (the default): alpha and its
per-position curve, a cliff, the tokens per target pass and the speedup at the user's c and v(k). No torch."""

from __future__ import annotations

import argparse
import json
import sys

from specviz.server_reports.explain import Explanation, explain
from specviz.server_reports.reading import ENGINES, read_engine_report
from specviz.server_reports.record import EngineReport
from specviz.settings import ConfigError


def add_engine_report_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The command's parser, added to the CLI's subparsers."""
    report = commands.add_parser(
        "engine-report",
        help="read what vLLM, SGLang or llama.cpp reported about a speculative run (Prometheus /metrics, log lines, "
        "response JSON) and explain it: alpha, the per-position curve, the speedup at your c and v(k)",
    )
    report.add_argument("file", help="the pasted text or JSON, saved to a file ('-': stdin)")
    report.add_argument(
        "--json", action="store_true", help="print what was read as JSON, in one shape for every engine"
    )
    report.add_argument("--engine", choices=sorted(ENGINES), help="the engine the text must come from (default: any)")
    report.add_argument("--c", type=float, help="your draft's step over your target's step (python -m specviz machine)")
    report.add_argument(
        "--gamma", type=int, nargs="+", default=(), help="block sizes to estimate (default: the engine's)"
    )
    report.add_argument(
        "--v",
        type=float,
        nargs="+",
        default=(),
        help="v(gamma): the target's pass over gamma + 1 "
        "tokens in one-token steps, one per --gamma or one for all (default 1)",
    )
    report.add_argument("--draft-length", type=int, help="k the engine drafted, where its text does not say it")


def engine_report_command(args: argparse.Namespace) -> None:
    report = read_engine_report(read_text(args.file), args.engine)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return
    print(report_text(report, explain(report, args.c, tuple(args.gamma), tuple(args.v), args.draft_length)))


def read_text(path: str) -> str:
    """The file's text ('-': stdin); an unreadable file is a ConfigError."""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as source:
            return source.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None


def report_text(report: EngineReport, explained: Explanation) -> str:
    """The report and its explanation as a few lines of text."""
    counts = ", ".join(
        f"{value} {label}"
        for value, label in (
            (report.drafts, "drafts"),
            (report.draft_tokens, "drafted tokens"),
            (report.accepted_tokens, "accepted"),
        )
        if value is not None
    )
    lines = [f"{report.engine} ({report.source})" + (f": {counts}" if counts else "")]
    if report.acceptance_rate is not None:
        lines.append(f"acceptance rate {report.acceptance_rate:.3f} (accepted / drafted tokens)")
    if report.mean_acceptance_length is not None:
        lines.append(f"mean acceptance length {report.mean_acceptance_length:.2f} tokens per target pass")
    if explained.alpha is not None:
        lines.append(f"alpha {explained.alpha:.3f}: {explained.alpha_how}")
    if explained.positions:
        lines.append("position  accepted  given the ones before  alpha^i")
        lines += [
            f"{p.position:>8}  {p.reported:8.3f}  {'-' if p.conditional is None else f'{p.conditional:.3f}':>21}  "
            f"{p.theory:7.3f}"
            for p in explained.positions
        ]
    if not explained.predictions:
        lines.append("give --c (your draft's step over your target's) and --gamma to estimate the speedup")
    lines.append(explained.sentence)
    return "\n".join(lines)
