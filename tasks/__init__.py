"""Thin Prefect tasks over :mod:`dpcore` (no math here)."""
