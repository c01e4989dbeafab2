"""Unattributed histograms (issue 17): the sorted group sizes released under differential privacy."""
