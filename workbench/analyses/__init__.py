"""The analyses: one package per study, each laid out as ``workbench/analyses/anisotropy/`` is.

Every study has the same rooms (see that package's docstring): ``config`` (a frozen, validated
config built from the notebook's parameters), ``compute`` (pure steps), ``results`` (frozen typed
results with ``to_dict``/``from_dict`` and ``figure(kind=...)``), ``figures``, ``collect`` (the only
place that loads models) and ``study`` (``run(config, cache_dir)`` and ``metrics(result)``).
"""

ANALYSES = (
    "anisotropy",
    "readouts",
    "geometric_memory",
    "concept_oscillation",
    "depth_ensemble",
    "acmas",
)
"""Every analysis of the workbench, in the order ``workbench demo`` runs them; each has a notebook
``notebooks/<name>.ipynb`` once it is built."""
