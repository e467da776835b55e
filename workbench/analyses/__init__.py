"""One module per analysis: the study's steps as functions returning result dataclasses."""

ANALYSES = ("anisotropy", "geometric_memory", "concept_oscillation", "depth_ensemble", "acmas")
"""Every analysis the workbench plans (CONTRACT.md); a notebook exists only for those built."""
