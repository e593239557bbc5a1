"""The drafters, one module each with its ``build(config, pair, target_state)``: the interface in ``base``, each
drafter's settings group in ``settings``, THE list of drafters in ``registry`` (data, no torch) and the code that
puts a drafter's module to work in ``modules``. (The rules have their own registry: :mod:`specviz.rules.registry`.)"""
