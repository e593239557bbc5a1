"""The CLI's commands that prepare a machine rather than decode: ``fetch`` (a published pair, then its defaults
measured here once) and ``machine`` (this machine's rates, the pair's passes, its roofline and c)."""

from __future__ import annotations

import argparse
import sys

from specviz.config import DecodeConfig
from specviz.models.published import BUNDLES


def fetch_command(args: argparse.Namespace) -> None:
    """Fetch a published pair and measure it on this machine once (``python -m specviz fetch``)."""
    from tqdm import tqdm

    from specviz.analysis.defaults import measure_pair_defaults, stored_defaults
    from specviz.models.published import fetch_model, fetched, needs

    models = BUNDLES[args.bundle]
    missing = tuple(model for model in models if not fetched(model))
    if missing:
        print(needs(missing, args.keep_gguf), file=sys.stderr)
    for model in models:
        print(f"{model.spec}: ready in {fetch_model(model, args.keep_gguf, progress_bar=tqdm)}")
    target, draft = (model.spec for model in models)
    if missing and stored_defaults(target, draft, args.device) is None:  # once, after the first fetch
        print(
            "Measuring the pair on this machine once (a few minutes: each precision of target and draft) ...",
            file=sys.stderr,
        )
        config = DecodeConfig(target=target, draft=draft, device=args.device)
        print(measure_pair_defaults(config, release=True, on_step=said_to_stderr).reason)


def said_to_stderr(words: str) -> None:
    """A long measurement's progress, a line each step, where a command's user reads it."""
    print(f"  measuring {words} ...", file=sys.stderr, flush=True)


def defaults_words(config: DecodeConfig) -> str:
    """Measure the pair's defaults here now (``python -m specviz machine``) and say what every page reads: this
    measurement where it was kept, else the quiet one it did not replace
    (:func:`~specviz.analysis.defaults.keep_defaults`)."""
    from specviz.analysis.defaults import measure_pair_defaults, stored_defaults

    measured = measure_pair_defaults(config, release=True, on_step=said_to_stderr)
    kept = stored_defaults(config.target, config.draft, config.device)
    if measured.busy and kept is not None and not kept.busy:
        return (
            "This measurement met a busy machine and was not kept; the pages read the quiet one measured before: "
            + kept.reason
        )
    return measured.reason


def machine_command(config: DecodeConfig) -> None:
    """Measure this machine once and print what it makes of the pair's passes (``python -m specviz machine``)."""
    from specviz.analysis.roofline import (
        best_predicted_gamma,
        busy_sentence,
        cost_coefficient,
        pair_profiles,
        roofline_table,
        speed_sentence,
    )
    from specviz.engine import load_pair
    from specviz.models.rates import machine_rates
    from specviz.runtime.cpu.kernel_paths import kernels_of

    print("Measuring this machine once (seconds; cached in $SPECVIZ_CACHE/machine) ...", file=sys.stderr)
    pair = load_pair(config)
    rates = machine_rates()
    print(
        f"read bandwidth {rates.bandwidth_gbs:.1f} GB/s; matrix products "
        + ", ".join(f"{dtype} {rate:.0f} GFLOP/s" for dtype, rate in rates.gflops.items())
    )
    for loaded in filter(None, (pair.target, pair.draft)):
        for path, profile in loaded.profiles.items():
            chosen = " (chosen)" if path == kernels_of(loaded.model) else ""
            print(
                f"{loaded.name} {profile.dtype} {path}{chosen}: pass over 1..9 tokens, ms: "
                + " ".join(f"{ms:.1f}" for ms in profile.pass_ms)
                + f"; step {profile.bandwidth_gbs:.1f} GB/s"
                + busy_sentence(profile)
            )
    target, draft = pair_profiles(config, pair)
    print(speed_sentence(target))
    print(roofline_table(target, draft, rates).round(3).to_string(index=False))
    if draft is not None:
        c = cost_coefficient(target, draft)
        print(
            f"c = {c:.3f} (the drafter's step over the target's); best gamma predicted at v(k): "
            + ", ".join(f"α {alpha}: {best_predicted_gamma(alpha, c, target)}" for alpha in (0.5, 0.6, 0.7, 0.8, 0.9))
        )
        del pair
        print(f"This pair's default here: {defaults_words(config)}")
