"""dpcore.storage: see the package map in the architecture notes (issue 49)."""
