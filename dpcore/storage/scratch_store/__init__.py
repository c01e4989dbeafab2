"""The scratch store: where the chunks a step sends to Dask workers, and what they send back, travel (issue 50).

What it owns
------------
* :class:`~dpcore.storage.scratch_store.store.ScratchStore`: the store the owner names
  with ``DPR_SCRATCH_URL`` (any fsspec URL: ``s3://bucket/prefix``,
  ``gs://…``, ``abfs://…``, ``file:///folder``). Unset: no store, today's
  behaviour (workers read the warehouse's scratch folder
  ``<warehouse>.scratch/`` themselves, so they must share its file system).
  Credentials come from the environment of the flow and of the workers only
  (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, …, as fsspec's backend reads
  them): a URL that carries credentials is refused, and no error message,
  log line or object name quotes them.
* The object layout: ``<url>/r-<hash of the release id>/<run nonce>/<shipment
  nonce>/<object nonce>``. No object name is derived from the data (random
  nonces only); a run's objects live under its own random prefix; each
  shipment's objects are deleted when its work ends, also when it fails
  (the callers: ``tasks.common._dask_map_shipped`` and the store-aware Dask
  runner of ``flows.runner``; a worker's copies by
  :func:`~dpcore.storage.scratch_store.shipping.drop_mirror`), and a crashed run's
  leftovers under its release's prefix are removed by the next run of the same
  release id (:meth:`ScratchStore.open_run`).
* :mod:`~dpcore.storage.scratch_store.shipping`: the transport itself. An object
  (a chunk task, a :class:`~dpcore.storage.partitions.Partitions` handle, a fit's
  result) is pickled; every path in it below the sender's scratch folder is
  replaced by a reference, the file behind it is uploaded, and the receiver
  (a worker's private temporary mirror, or the flow's scratch folder) gets the
  same object with its own paths and the files downloaded. What a worker
  receives is exactly what it received before (the same files, the same
  objects): no new private data leaves the flow process; the warehouse and
  the ledger never do.

Everything stored is private (DESIGN.md rule 11): rows of the validated table,
per-chunk arrays. It is kept only while a step runs; nothing here logs a file's
content, a size or a count.
"""
from __future__ import annotations

from .store import ScratchStore, ScratchStoreError, release_key, store_from_env

__all__ = ["ScratchStore", "ScratchStoreError", "release_key", "store_from_env"]
