"""The registries and settings groups, as data (no torch, below :mod:`specviz.config`): THE list of verification
rules (:mod:`~specviz.registry.rules`) and of drafters (:mod:`~specviz.registry.drafters`), each rule's settings
group (:mod:`~specviz.registry.rule_settings`), each drafter's (:mod:`~specviz.registry.drafter_settings`) and the
settings every run shares (:mod:`~specviz.registry.shared_settings`). The config validates names against these;
the torch-heavy packages (:mod:`specviz.rules`, :mod:`specviz.drafters`) import them, never the other way."""
