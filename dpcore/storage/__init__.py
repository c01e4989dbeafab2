"""Storage: where the pipeline keeps its files and tables, and who may read them.

Owns:

* :mod:`.settings` -- the home folder and every path under it (``DPR_HOME``, ``DPR_WAREHOUSE``, ...).
* :mod:`.warehouse` -- the DuckDB warehouse (one writer, short-lived handles) and
  :mod:`.warehouse_lease`, the lease that keeps a second process from opening it.
* :mod:`.private_files` -- owner-only files and folders (0600/0700).
* :mod:`.lineage` -- the owner's secret key, HMACs of identifiers and random nonces (no identifier
  derived from the data is public).
* :mod:`.partitions` -- warehouse tables exported as Parquet chunks in the private scratch folder.
* :mod:`.quoting` -- SQL identifiers and literals quoted.
* :mod:`.scratch_store` -- the store chunks travel through to and from Dask workers (``DPR_SCRATCH_URL``).

Who may import it: every ``dpcore`` package except :mod:`dpcore.runtime`, and ``tasks/``/``flows/``/``dpr/``.
It imports :mod:`dpcore.runtime` only.
"""
