"""The drafters, one module each with its ``build(config, pair, target_state)``, and the registry beside them
(:mod:`specviz.drafters.registry`: the only list of drafters and rules). The interface is in ``base``."""
