"""Training what specviz ships: teacher text from the target, the distilled draft model
(``draft_model``) and the parallel drafters' heads (``parallel_drafters``)."""
