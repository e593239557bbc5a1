"""Headless command line: ``python -m specviz trace`` (JSON traces) and ``python -m specviz generate``.

Examples::

    python -m specviz trace --prompt "Hello" --drafter layerskip --rule greedy --gamma 4 --out -
    python -m specviz trace --target ./big --draft ./small --drafter model --rule sample --samples 100
    python -m specviz generate --prompt "Write a haiku" --drafter ngram
    python -m specviz html --out lesson.html    # the app's default lesson, its race as the speed slide
    python -m specviz race --target qwen-coder-1.5b --draft qwen-coder-0.5b --fastest --out -
    python -m specviz train-drafter --kind blockwise --seed 0
    python -m specviz train-draft --seed 0
    python -m specviz train-eagle --answers 5000 --steps 7000
    python -m specviz fetch qwen-coder
    python -m specviz machine --dtype bfloat16
    python -m specviz app --server.port 8502
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from typing import TYPE_CHECKING, TextIO

from specviz.cli.machine import fetch_command, machine_command
from specviz.cli.server_reports import add_engine_report_command, engine_report_command
from specviz.config import DecodeConfig, field_params
from specviz.limits import DEFAULT_PROMPT
from specviz.models.published import BUNDLES
from specviz.models.wheels import FetchError
from specviz.serving.processes import serve_app
from specviz.serving.urlstate import FieldValue, parse_value
from specviz.settings import ConfigError, ModelLoadError, VocabularyMismatchError
from specviz.training.commands import TRAINING_COMMANDS
from specviz.training.options import add_training_commands, int_list

if TYPE_CHECKING:
    from specviz.engine import ModelPair

USER_ERRORS = (ConfigError, ModelLoadError, VocabularyMismatchError, FetchError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m specviz", description="Speculative decoding with real models, recorded round by round."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("app", help="serve the app (any further options go to `streamlit run`: --server.port 8502)")
    trace = commands.add_parser("trace", help="run and write the full trace(s) as JSON")
    generate = commands.add_parser("generate", help="run and print the generated text")
    lesson = commands.add_parser(
        "html",
        help="run and write ONE self-contained HTML lesson: the round player, "
        "presenter view and quiz, openable with no server and no network",
    )
    lesson.add_argument("--out", required=True, help="the HTML file to write")
    race = commands.add_parser(
        "race",
        help="time the target alone and speculative decoding one after the other, as the Race page does, and write "
        "JSON: each lane's output ids, wall seconds and tokens/s, the speedup, identical, the process's peak RSS",
    )
    race.add_argument("--out", default="-", help="output file ('-' = stdout)")
    lesson.add_argument("--title", default=None, help="the lesson's title (default: models, rule and gamma)")
    lesson.add_argument("--no-race", dest="race", action="store_false", help="leave the race (the speed slide) out")
    machine = commands.add_parser(
        "machine",
        help="print this machine's profile for a model pair: CPU, kernel paths, "
        "the passes over 1..9 tokens, bandwidth, v(k), the best gamma",
    )
    add_config_options(machine)
    for sub in (trace, generate, lesson, race):
        add_config_options(sub)
        # a lesson or a race opens on the app's prompt
        prompt = sub.add_mutually_exclusive_group(required=sub not in (lesson, race))
        prompt.add_argument("--prompt", help="prompt text (the chat template is applied for chat models)")
        prompt.add_argument("--prompt-ids", type=int_list, help="raw prompt token ids, comma-separated (no template)")
        sub.add_argument(
            "--fastest",
            nargs="?",
            const="",
            default=None,
            metavar="PRECISIONS",
            help="the pair's fastest exact configuration measured on this machine for the target's precision: the "
            "draft model, its precision and γ (measured once, then stored); with target precisions (e.g. int8,int4), "
            "the fastest of those targets too, by the tokens a second its configuration is predicted at",
        )
    add_training_commands(commands)
    add_engine_report_command(commands)
    fetch = commands.add_parser("fetch", help="download, check and de-quantise a published model pair into the cache")
    fetch.add_argument(
        "bundle", choices=sorted(BUNDLES), help="qwen-coder: Qwen2.5-Coder-0.5B-Instruct and -1.5B-Instruct"
    )
    fetch.add_argument("--device", default="auto", help="the device the app will run the pair on (measured there)")
    fetch.add_argument("--keep-gguf", action="store_true", help="keep the assembled GGUF files beside the safetensors")
    trace.add_argument(
        "--samples", type=int, default=1, help="N runs with seeds seed..seed+N-1, one JSON trace per line"
    )
    trace.add_argument("--out", default="-", help="output file ('-' = stdout)")
    trace.add_argument("--indent", type=int, default=None, help="pretty-print a single trace with this indent")
    trace.add_argument(
        "--no-timings", action="store_true", help="zero the measured times so equal runs give equal bytes"
    )
    return parser


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """One option per DecodeConfig field its Param opens to the CLI: flag, choices, default and help
    all come from the field (a True boolean becomes ``--no-<name>``)."""
    defaults = DecodeConfig()
    for name, described in field_params().items():
        if not described.cli:
            continue
        default, flag = defaults.value(name), "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(
                f"--no-{flag[2:]}" if default else flag,
                dest=name,
                default=default,
                action="store_false" if default else "store_true",
                help=described.help,
            )
            continue
        parser.add_argument(
            flag,
            dest=name,
            default=default,
            type=partial(_parsed, name),
            help=described.help,
            choices=described.choices if isinstance(default, str) and described.choices else None,
        )


def _parsed(name: str, raw: str) -> FieldValue:
    try:
        return parse_value(name, raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"malformed value {raw!r} for --{name.replace('_', '-')}") from exc


def config_from_args(args: argparse.Namespace) -> DecodeConfig:
    return DecodeConfig(**{name: getattr(args, name) for name, p in field_params().items() if p.cli}).validated()


def run(args: argparse.Namespace) -> None:
    if args.command in COMMANDS:
        COMMANDS[args.command](args)
        return
    from specviz.engine import load_pair, speculative_decode  # torch import deferred until the args are valid
    from specviz.serving.pairs import with_pair_defaults

    config = config_from_args(args)
    if args.command == "html":  # the lesson the app would show: the pair's measured defaults
        config = with_pair_defaults(config)
    if args.command in ("html", "race"):  # the app's prompt unless one is given
        args.prompt = args.prompt if args.prompt or args.prompt_ids else DEFAULT_PROMPT
    pays = True
    if args.fastest is not None:
        from specviz.analysis.defaults import fastest_config

        config, chosen, pays = fastest_config(config, tuple(d for d in args.fastest.split(",") if d))
        print(chosen, file=sys.stderr)
    pair = load_pair(config)
    if args.command == "race":
        write_race(config, pair, args, speculative=pays)
        return
    if args.command in ("generate", "html"):
        trace = speculative_decode(config, prompt=args.prompt, prompt_ids=args.prompt_ids, pair=pair)
        if args.command == "generate":
            print(trace.output_text)
            return
        from specviz.analysis.race import run_race
        from specviz.presentation.player import lesson_html

        if not trace.rounds:
            raise ConfigError("Nothing was generated (the model ended at once), so there is no lesson to write")
        race = run_race([(config, pair)], args.prompt, args.prompt_ids) if args.race else None
        with open(args.out, "w", encoding="utf-8") as page:
            page.write(lesson_html(trace, args.title, race=race))
        print(f"wrote {args.out}: {len(trace.rounds)} rounds, open it in any browser")
        return
    if not 1 <= args.samples <= 100_000:
        raise ConfigError(f"--samples must be in [1, 100000]; got {args.samples}")
    out: TextIO = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    try:
        for i in range(args.samples):
            trace = speculative_decode(
                config.replace(seed=config.seed + i), prompt=args.prompt, prompt_ids=args.prompt_ids, pair=pair
            )
            if args.no_timings:
                trace = trace.without_timings()
            out.write(trace.to_json(indent=args.indent if args.samples == 1 else None) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()


def write_race(config: DecodeConfig, pair: ModelPair, args: argparse.Namespace, speculative: bool = True) -> None:
    """``python -m specviz race``: the race's summary as JSON, with this process's peak resident memory; the target
    alone only where not ``speculative`` (``--fastest`` where no draft pays: a losing lane is not raced)."""
    import resource

    from specviz.analysis.race import run_race, target_alone_summary

    if speculative:
        summary = run_race([(config, pair)], args.prompt, args.prompt_ids).summary()
    else:
        summary = target_alone_summary(config, pair, args.prompt, args.prompt_ids)
    summary["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux: kB
    text = json.dumps(summary, indent=2) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(text)


COMMANDS = {
    "fetch": fetch_command,
    "machine": lambda args: machine_command(config_from_args(args)),
    "engine-report": engine_report_command,
    **TRAINING_COMMANDS,
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, streamlit_args = parser.parse_known_args(argv)
    if args.command == "app":
        serve_app(streamlit_args)  # this process becomes the server
    elif streamlit_args:
        parser.error(f"unrecognized arguments: {' '.join(streamlit_args)}")
    try:
        run(args)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
