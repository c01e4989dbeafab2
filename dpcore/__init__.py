"""dpcore: the privacy machinery and algorithms of the private outlier-release pipeline.

A plain library (numpy/scipy/duckdb, no Prefect): the flows in ``flows/`` and the
tasks in ``tasks/`` are thin wrappers around it.
"""
__version__ = "0.1.0"
