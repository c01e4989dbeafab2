"""dpcore: the privacy machinery and algorithms of the private outlier-release pipeline.

A plain library (numpy/scipy/duckdb, no Prefect): the flows in ``flows/`` and the
tasks in ``tasks/`` are thin wrappers around it.

Its packages, each importing only the ones below it (``|``: same layer, independent of each other;
the contracts are in ``.importlinter``, checked by ``tests/test_import_contracts.py``)::

    run                                           a release run: stages, cost plan, registration, run records
    steps                                         the private steps (charge, mechanism, output)
    publish | detect | validation | mechanisms    bundle and pictures | detector | validation | DP mechanisms
    ingest                                        the input into ``raw``, its sources, spec drafts
    release                                       the release definition: spec, periods, series
    budget | explain | noise                      amounts and the ledger | rule discovery, units | noise
    storage                                       settings, warehouse, private files, lineage keys
    runtime                                       chunks, threads, child processes, lazy imports, faults

Each package's docstring says what it owns and who may import it.
"""
__version__ = "0.1.0"


def _arrow_allocates_through_the_system() -> None:
    """pyarrow's buffers from the system allocator (``malloc``), not its bundled mimalloc (issue 29, goal 4).

    mimalloc kept the memory of freed Arrow buffers (Parquet chunks read,
    batches streamed from DuckDB, frames converted) for reuse instead of
    returning it, and every chunked stage held it on top of its chunk: the
    whole pipeline on 10x the demo under ``DPR_MEMORY_LIMIT=1GiB``
    (``benchmarks.scale``) peaked at 1,104 MiB (process tree) with mimalloc and
    1,010 MiB with the system allocator, 60-100 MiB lower in every stage; the
    detector's fits alone 571 -> 511 MiB at about the same CPU time (21.4 vs
    22.1 s). pyarrow reads ``ARROW_DEFAULT_MEMORY_POOL`` when it is first
    imported, so it is set here (unless the environment sets it: that choice
    is kept) and passed on to child processes; when pyarrow was imported
    first, its default pool is switched (buffers already allocated stay with
    their pool).
    """
    import os
    import sys

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.set_memory_pool(pa.system_memory_pool())


_arrow_allocates_through_the_system()
