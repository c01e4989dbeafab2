"""Ingest: read a release's input exactly as given into the warehouse's ``raw`` schema.

Owns:

* :mod:`.raw` -- the CSV and Parquet reader and the ``raw`` catalogue (fresh random ingest ids,
  content dedup within one release id, unreadable rows kept as rows).
* :mod:`.sources` -- the other kinds of input (PostgreSQL, a DuckDB file, a Parquet dataset), read
  into the same text table a CSV gives, their column types checked against the spec.
* :mod:`.spec_draft` -- ``dpr spec draft``: a spec drafted from an input's header and columns, each value
  read from the data marked for the owner to replace.

Why here: all three read the owner's input; they need the release definition (:mod:`dpcore.release`)
and storage, nothing above.

Who may import it: :mod:`dpcore.validation`, :mod:`dpcore.steps`, :mod:`dpcore.run` (and
``tasks/``/``flows/``/``dpr/``). It imports :mod:`dpcore.release`, :mod:`dpcore.storage` and
:mod:`dpcore.runtime` only.
"""
