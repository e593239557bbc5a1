"""Each drafter's module put to work for a run: the drafter built, its autoregressive draft, its module on the
target's states and their shipped weights.

The registry (:mod:`specviz.registry.drafters`) names each drafter's module as a string, so it holds no model code
and sits below the config; here a module is imported on first use and reached through the protocols of
:mod:`specviz.drafters.base` (``DrafterModule``, ``AutoregressiveModule``, ``StatesModule``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, cast

from specviz.registry.drafter_settings import MachineChoice
from specviz.registry.drafters import DrafterEntry, drafter_entry
from specviz.registry.shared_settings import DrafterShared

if TYPE_CHECKING:
    from specviz.config import DecodeConfig
    from specviz.drafters import eagle, layerskip, model, ngram, oracle, parallel, suffix, tree
    from specviz.drafters.base import AutoregressiveModule, Drafter, DrafterModule, StatesModule
    from specviz.models.loading import LoadedModel
    from specviz.models.pair import ModelPair
    from specviz.runtime.protocol import ForwardFn, KVCachedSequence

    _autoregressive: tuple[AutoregressiveModule, ...] = (model, layerskip, oracle)  # modules meet their protocols
    _on_states: tuple[StatesModule, ...] = (parallel, eagle)
    _others: tuple[DrafterModule, ...] = (ngram, suffix, tree)


def drafter_module(entry: DrafterEntry) -> Any:
    """The module that implements ``entry`` (in :mod:`specviz.drafters`, or a full dotted name), imported now."""
    return importlib.import_module(entry.module if "." in entry.module else f"specviz.drafters.{entry.module}")


def on_this_machine(config: DecodeConfig, target: LoadedModel) -> DecodeConfig:
    """``config`` with its drafter's machine-dependent choice (:class:`~specviz.registry.drafter_settings.
    MachineChoice`: a flat tree's block) made from ``target``'s measured profile on this machine; a config whose
    choice is made already (its link carried it) is returned as it is, so it builds the same drafter on any machine.
    The engine's run and the app's sidebar call it where the config is made; building a drafter never reads the
    profile."""
    entry = drafter_entry(config.drafter)
    group = config.settings(entry.settings) if entry.settings else None
    if not isinstance(group, MachineChoice) or not group.unresolved():
        return config
    from specviz.models.profile import model_profile  # torch: imported when a choice is made

    chosen = group.resolved(model_profile(target).flat_until())
    return config.replace(**{name: getattr(chosen, name) for name in chosen.machine_fields})


def drafter_settings(config: DecodeConfig) -> tuple[Any, DrafterShared]:
    """What the config's drafter is built from: its own settings group (None without one) and the shared settings
    drafters read, with the other groups its entry reads (``also_reads``); its module never sees the whole config."""
    entry = drafter_entry(config.drafter)
    return (config.settings(entry.settings) if entry.settings else None), DrafterShared.of(config, entry)


def make_drafter(config: DecodeConfig, pair: ModelPair, target_state: KVCachedSequence | None = None) -> Drafter:
    """The drafter the config names, built by its module (drafters on the target's states read ``target_state``)."""
    module = cast("DrafterModule", drafter_module(drafter_entry(config.drafter)))
    return module.build(*drafter_settings(config), pair, target_state)


def draft_source(config: DecodeConfig, pair: ModelPair) -> tuple[LoadedModel, ForwardFn] | None:
    """The config's autoregressive draft (model, forward), None for a drafter without one."""
    entry = drafter_entry(config.drafter)
    if not entry.autoregressive:
        return None
    return cast("AutoregressiveModule", drafter_module(entry)).draft_source(*drafter_settings(config), pair)


def states_module(name: str) -> StatesModule | None:
    """The module of a drafter on the target's states (its own draft scoring and timing), else None."""
    entry = drafter_entry(name)
    return cast("StatesModule", drafter_module(entry)) if entry.requires_model_outputs else None


def shipped_weights(name: str) -> dict[str, Any] | None:
    """A drafter's shipped trained weights, described (drafters on the target's states), else None."""
    own = states_module(name)
    return own.shipped_weights(name) if own else None
