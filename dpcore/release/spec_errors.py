"""The release spec's error: one class, so the spec loader and the series templates share it without a cycle."""
from __future__ import annotations


class SpecError(ValueError):
    """A release spec is missing, unreadable or invalid; the message names the key."""
