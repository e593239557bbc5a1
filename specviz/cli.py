"""Headless command line: ``python -m specviz trace`` (JSON traces) and ``python -m specviz generate``.

Examples::

    python -m specviz trace --prompt "Hello" --drafter layerskip --rule greedy --gamma 4 --out -
    python -m specviz trace --target ./big --draft ./small --drafter model --rule sample --samples 100
    python -m specviz generate --prompt "Write a haiku" --drafter ngram
"""

from __future__ import annotations

import argparse
import sys

from .config import DRAFTERS, RULES, TREE_MODES, ConfigError, DecodeConfig
from .models import ModelLoadError, VocabularyMismatchError

USER_ERRORS = (ConfigError, ModelLoadError, VocabularyMismatchError)


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc


def build_parser() -> argparse.ArgumentParser:
    d = DecodeConfig()
    parser = argparse.ArgumentParser(prog="python -m specviz", description="Speculative decoding with real models, recorded round by round.")
    commands = parser.add_subparsers(dest="command", required=True)
    trace = commands.add_parser("trace", help="run and write the full trace(s) as JSON")
    generate = commands.add_parser("generate", help="run and print the generated text")
    for sub in (trace, generate):
        sub.add_argument("--target", default=d.target, help="target model: 'embedded' (default), a hub id, or a save_pretrained directory")
        sub.add_argument("--draft", default=None, help="draft model spec (for --drafter model)")
        sub.add_argument("--drafter", choices=DRAFTERS, default=d.drafter,
                         help="who drafts: a draft model, the target with layers skipped, n-gram prompt lookup, or a "
                              "token tree (Recursive Speculative Decoding; from --draft if given, else layer-skip)")
        sub.add_argument("--rule", choices=RULES, default=d.rule, help="verification rule: greedy exact match, speculative sampling, or SpecDec top-beta + tau")
        sub.add_argument("--gamma", type=int, default=d.gamma, help="tokens drafted per round (1-16)")
        sub.add_argument("--beta", type=int, default=d.beta, help="top-beta: how many of the target's best tokens a draft token may be (1-10)")
        sub.add_argument("--tau", type=float, default=d.tau, help="top-beta: max log p(top1) - log p(token)")
        sub.add_argument("--temperature", type=float, default=d.temperature, help="sampling temperature for p and q (0 = argmax)")
        sub.add_argument("--top-k", type=int, default=d.top_k, help="keep the k most likely tokens before sampling (0 = off)")
        sub.add_argument("--top-p", type=float, default=d.top_p, help="nucleus mass in (0, 1] (1 = off)")
        sub.add_argument("--seed", type=int, default=d.seed, help="seed of every random draw")
        sub.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, help="stop after this many new tokens")
        prompt = sub.add_mutually_exclusive_group(required=True)
        prompt.add_argument("--prompt", help="prompt text (the chat template is applied for chat models)")
        prompt.add_argument("--prompt-ids", type=_int_list, help="raw prompt token ids, comma-separated (no template)")
        sub.add_argument("--no-chat-template", action="store_true", help="do not wrap --prompt in the chat template")
        sub.add_argument("--skip-layers", type=_int_list, default=None, help="layer-skip drafter: layers to skip, comma-separated (default: the two middle layers)")
        sub.add_argument("--exit-threshold", type=float, default=d.exit_threshold, help="layer-skip: adaptive draft exit threshold on the draft's top-1 probability (0 = off)")
        sub.add_argument("--ngram-max", type=int, default=d.ngram_max, help="n-gram drafter: longest suffix to look up")
        sub.add_argument("--tree-mode", choices=TREE_MODES, default=d.tree_mode,
                         help="tree drafter: constant branching (RSD-C, Gumbel-top-k) or beam (RSD-S, stochastic beam search)")
        sub.add_argument("--branching", type=int, default=d.branching, help="tree drafter, constant mode: children per node (1-8)")
        sub.add_argument("--tree-depth", type=int, default=d.tree_depth, help="tree drafter: draft iterations / tree depth")
        sub.add_argument("--beam-width", type=int, default=d.beam_width, help="tree drafter, beam mode: nodes kept per level")
        sub.add_argument("--top-n", type=int, default=d.top_n, help="top tokens recorded per distribution")
        sub.add_argument("--device", default=d.device, help="auto (CUDA if available), cpu, cuda, cuda:N")
    trace.add_argument("--samples", type=int, default=1, help="N runs with seeds seed..seed+N-1, one JSON trace per line")
    trace.add_argument("--out", default="-", help="output file ('-' = stdout)")
    trace.add_argument("--indent", type=int, default=None, help="pretty-print a single trace with this indent")
    trace.add_argument("--no-timings", action="store_true", help="zero the measured times so equal runs give equal bytes")
    return parser


def config_from_args(args: argparse.Namespace) -> DecodeConfig:
    return DecodeConfig(
        target=args.target, draft=args.draft, drafter=args.drafter, rule=args.rule, gamma=args.gamma,
        beta=args.beta, tau=args.tau, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
        seed=args.seed, max_new_tokens=args.max_new_tokens, chat_template=not args.no_chat_template,
        skip_layers=tuple(args.skip_layers) if args.skip_layers is not None else None,
        exit_threshold=args.exit_threshold, ngram_max=args.ngram_max, tree_mode=args.tree_mode, branching=args.branching,
        tree_depth=args.tree_depth, beam_width=args.beam_width, top_n=args.top_n, device=args.device,
    ).validated()


def run(args: argparse.Namespace) -> None:
    from .engine import load_pair, speculative_decode  # torch import deferred until the args are valid

    config = config_from_args(args)
    pair = load_pair(config)
    if args.command == "generate":
        trace = speculative_decode(config, prompt=args.prompt, prompt_ids=args.prompt_ids, pair=pair)
        print(trace.output_text)
        return
    if not 1 <= args.samples <= 100_000:
        raise ConfigError(f"--samples must be in [1, 100000]; got {args.samples}")
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    try:
        for i in range(args.samples):
            trace = speculative_decode(config.replace(seed=config.seed + i), prompt=args.prompt, prompt_ids=args.prompt_ids, pair=pair)
            if args.no_timings:
                trace = trace.without_timings()
            out.write(trace.to_json(indent=args.indent if args.samples == 1 else None) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
