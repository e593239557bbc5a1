"""The drafters, one module each with its ``build(settings, shared, pair, target_state)``: the interface in ``base``
and the code that puts a drafter's module to work in ``modules``. THE list of drafters and their settings groups are
data in :mod:`specviz.registry` (:mod:`~specviz.registry.drafters`, :mod:`~specviz.registry.drafter_settings`), below
the config."""
