"""Headless command line: ``python -m specviz trace`` (JSON traces) and ``python -m specviz generate``.

Examples::

    python -m specviz trace --prompt "Hello" --drafter layerskip --rule greedy --gamma 4 --out -
    python -m specviz trace --target ./big --draft ./small --drafter model --rule sample --samples 100
    python -m specviz generate --prompt "Write a haiku" --drafter ngram
    python -m specviz html --prompt "Explain gravity" --rule sample --out lesson.html
    python -m specviz train-drafter --kind blockwise --seed 0
    python -m specviz train-draft --seed 0
    python -m specviz fetch qwen-coder
"""

from __future__ import annotations

import argparse
import sys
from functools import partial

from specviz.config import ConfigError, DecodeConfig, field_params
from specviz.drafters.registry import parallel_kinds
from specviz.models.errors import ModelLoadError, VocabularyMismatchError
from specviz.models.published import BUNDLES
from specviz.models.wheels import FetchError
from specviz.urlstate import parse_value

USER_ERRORS = (ConfigError, ModelLoadError, VocabularyMismatchError, FetchError)


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m specviz",
                                     description="Speculative decoding with real models, recorded round by round.")
    commands = parser.add_subparsers(dest="command", required=True)
    trace = commands.add_parser("trace", help="run and write the full trace(s) as JSON")
    generate = commands.add_parser("generate", help="run and print the generated text")
    lesson = commands.add_parser("html", help="run and write ONE self-contained HTML lesson: the round player, "
                                              "presenter view and quiz, openable with no server and no network")
    lesson.add_argument("--out", required=True, help="the HTML file to write")
    lesson.add_argument("--title", default=None, help="the lesson's title (default: models, rule and gamma)")
    for sub in (trace, generate, lesson):
        add_config_options(sub)
        prompt = sub.add_mutually_exclusive_group(required=True)
        prompt.add_argument("--prompt", help="prompt text (the chat template is applied for chat models)")
        prompt.add_argument("--prompt-ids", type=_int_list, help="raw prompt token ids, comma-separated (no template)")
    draft = commands.add_parser("train-draft", help="distil the embedded draft model from the embedded target")
    draft.add_argument("--layers", type=_int_list, default=None,
                       help="the target's decoder layers the draft starts from (default 0,10,20,29)")
    draft.add_argument("--epochs", type=float, default=None, help="passes over the teacher text (default 6)")
    draft.add_argument("--divergence", choices=("fkl", "tvd"), default="fkl",
                       help="forward KL (default) or total variation")
    draft.add_argument("--temperatures", default=None,
                       help="comma-separated: the target answers each prompt once per temperature, 0 = greedy "
                            "(default 0,0.7)")
    draft.add_argument("--draft-vocab", type=int, default=None,
                       help="FR-Spec head size the engine uses by default (default 8192)")
    draft.add_argument("--rows-per-step", type=int, default=None, help="answers per optimiser step (default 8)")
    draft.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-3)")
    draft.add_argument("--generation-batch", type=int, default=None,
                       help="prompts the target answers per generate call (default 64; part of the cache key)")
    draft.add_argument("--seed", type=int, default=0)
    draft.add_argument("--device", default="auto")
    draft.add_argument("--out", default=None,
                       help="weights file (default: the shipped specviz/weights/smollm2-135m-draft.safetensors)")
    train = commands.add_parser(
        "train-drafter", help="train a parallel drafter (blockwise heads or mask-query) on the target's own text")
    train.add_argument("--kind", choices=parallel_kinds(), required=True, help="which drafter to train")
    train.add_argument("--target", default="embedded",
                       help="target model spec (default: the embedded SmolLM2-135M-Instruct)")
    train.add_argument("--k", type=int, default=4, help="tokens drafted per pass (1-16)")
    train.add_argument("--window", type=int, default=32, help="mask-query: target states each query may attend to")
    train.add_argument("--steps", type=int, default=2000, help="optimiser steps")
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--new-tokens", type=int, default=160, help="tokens the target generates per training prompt")
    train.add_argument("--prompts", default=None,
                       help="prompts file, one per line (default: specviz/data/train_prompts.txt)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", default="auto")
    train.add_argument("--out", default=None,
                       help="weights file (default: the shipped specviz/weights/ file for the kind)")
    fetch = commands.add_parser("fetch", help="download, check and de-quantise a published model pair into the cache")
    fetch.add_argument("bundle", choices=sorted(BUNDLES),
                       help="qwen-coder: Qwen2.5-Coder-0.5B-Instruct and -1.5B-Instruct")
    fetch.add_argument("--keep-gguf", action="store_true", help="keep the assembled GGUF files beside the safetensors")
    trace.add_argument("--samples", type=int, default=1,
                       help="N runs with seeds seed..seed+N-1, one JSON trace per line")
    trace.add_argument("--out", default="-", help="output file ('-' = stdout)")
    trace.add_argument("--indent", type=int, default=None, help="pretty-print a single trace with this indent")
    trace.add_argument("--no-timings", action="store_true",
                       help="zero the measured times so equal runs give equal bytes")
    return parser


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """One option per DecodeConfig field its Param opens to the CLI: flag, choices, default and help
    all come from the field (a True boolean becomes ``--no-<name>``)."""
    for name, described in field_params().items():
        if not described.cli:
            continue
        default, flag = getattr(DecodeConfig(), name), "--" + name.replace("_", "-")
        if isinstance(default, bool):
            parser.add_argument(f"--no-{flag[2:]}" if default else flag, dest=name, default=default,
                                action="store_false" if default else "store_true", help=described.help)
            continue
        parser.add_argument(flag, dest=name, default=default, type=partial(_parsed, name), help=described.help,
                            choices=described.choices if isinstance(default, str) and described.choices else None)


def _parsed(name: str, raw: str):
    try:
        return parse_value(name, raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"malformed value {raw!r} for --{name.replace('_', '-')}") from exc


def config_from_args(args: argparse.Namespace) -> DecodeConfig:
    return DecodeConfig(**{name: getattr(args, name) for name, p in field_params().items() if p.cli}).validated()


def train_drafter_command(args: argparse.Namespace) -> None:
    from pathlib import Path

    from specviz.drafters.parallel import default_weights
    from specviz.models.loading import load_model
    from specviz.training.parallel_drafters import PROMPTS_FILE, read_prompts, train_and_save

    if not 1 <= args.k <= 16 or not 1 <= args.window <= 512 or not 1 <= args.steps <= 100_000 or args.batch_size < 1:
        raise ConfigError("train-drafter: --k must be in [1, 16], --window in [1, 512], --steps in [1, 100000]")
    target = load_model(args.target, args.device)
    out = Path(args.out) if args.out else default_weights(args.kind)
    command = "python -m specviz " + " ".join(sys.argv[1:]) if args.command else ""
    train_and_save(args.kind, target, out, new_tokens=args.new_tokens, command=command,
                   prompts=read_prompts(Path(args.prompts) if args.prompts else PROMPTS_FILE), k=args.k,
                   window=args.window, steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed)


def train_draft_command(args: argparse.Namespace) -> None:
    import dataclasses
    import json
    from pathlib import Path

    from specviz.models.embedded_draft import WEIGHTS_FILE
    from specviz.models.loading import load_model
    from specviz.training.draft_model import TrainSettings, train_draft

    try:
        temperatures = tuple(float(t) for t in args.temperatures.split(",")) if args.temperatures else None
    except ValueError as exc:
        raise ConfigError(f"train-draft: --temperatures takes comma-separated numbers; "
                          f"got {args.temperatures!r}") from exc
    given = dict(layers=tuple(args.layers) if args.layers else None, epochs=args.epochs, divergence=args.divergence,
                 draft_vocab=args.draft_vocab, seed=args.seed, temperatures=temperatures,
                 rows_per_step=args.rows_per_step, lr=args.lr, generation_batch=args.generation_batch)
    settings = TrainSettings(**{k: v for k, v in given.items() if v is not None})
    if (not 1 <= len(settings.layers) <= 8 or not 0 < settings.epochs <= 100 or settings.draft_vocab < 0
            or not all(0 <= t <= 2 for t in settings.temperatures) or settings.rows_per_step < 1
            or settings.generation_batch < 1 or not 0 < settings.lr < 1):
        raise ConfigError("train-draft: --layers takes 1 to 8 layer numbers, --epochs is in (0, 100], "
                          "--draft-vocab >= 0, --temperatures in [0, 2], --rows-per-step and --generation-batch >= 1, "
                          "--lr in (0, 1)")
    target = load_model("embedded", args.device)  # float32: the teacher's probabilities in float32 on any device
    bad = [i for i in settings.layers if not 0 <= i < target.num_layers]
    if bad:
        raise ConfigError(f"train-draft: layers {bad} are not layers of the target (0..{target.num_layers - 1})")
    out = Path(args.out) if args.out else WEIGHTS_FILE
    manifest = train_draft(target, settings, out=out, command="python -m specviz " + " ".join(sys.argv[1:]))
    print(json.dumps(manifest, indent=2))
    print(f"saved {out} ({out.stat().st_size / 1e6:.1f} MB); settings {dataclasses.asdict(settings)}")


def fetch_command(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from specviz.models.published import fetch_model, fetched, needs

    models = BUNDLES[args.bundle]
    missing = tuple(model for model in models if not fetched(model))
    if missing:
        print(needs(missing, args.keep_gguf), file=sys.stderr)
    for model in models:
        print(f"{model.spec}: ready in {fetch_model(model, args.keep_gguf, progress_bar=tqdm)}")


def run(args: argparse.Namespace) -> None:
    if args.command in COMMANDS:
        COMMANDS[args.command](args)
        return
    from specviz.engine import load_pair, speculative_decode  # torch import deferred until the args are valid

    config = config_from_args(args)
    pair = load_pair(config)
    if args.command in ("generate", "html"):
        trace = speculative_decode(config, prompt=args.prompt, prompt_ids=args.prompt_ids, pair=pair)
        if args.command == "generate":
            print(trace.output_text)
            return
        from specviz.presentation.player import lesson_html

        if not trace.rounds:
            raise ConfigError("Nothing was generated (the model ended at once), so there is no lesson to write")
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(lesson_html(trace, args.title))
        print(f"wrote {args.out}: {len(trace.rounds)} rounds, open it in any browser")
        return
    if not 1 <= args.samples <= 100_000:
        raise ConfigError(f"--samples must be in [1, 100000]; got {args.samples}")
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    try:
        for i in range(args.samples):
            trace = speculative_decode(config.replace(seed=config.seed + i), prompt=args.prompt,
                                       prompt_ids=args.prompt_ids, pair=pair)
            if args.no_timings:
                trace = trace.without_timings()
            out.write(trace.to_json(indent=args.indent if args.samples == 1 else None) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()


COMMANDS = {"fetch": fetch_command, "train-drafter": train_drafter_command, "train-draft": train_draft_command}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
