"""Prefect flows: one per stage plus the parent ``release_pipeline``."""
