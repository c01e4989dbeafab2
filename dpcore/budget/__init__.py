"""The privacy budget and its ledger: what every release may spend and what it has spent.

Owns:

* :mod:`.amounts` -- privacy amounts (:class:`~.amounts.PrivacyCost`, exact integer units), the
  neighbour relations and the conversion of a charge between them (:func:`~.amounts.charge_under`).
* :mod:`.ledger` -- the persistent ledger in the warehouse: registrations, reservations, charges
  (each exactly once, by an idempotency key), give-backs, the series cap's atomic check.
* :mod:`.ledger_home` -- the ledger's copy outside the warehouse, so a lost warehouse never resets a budget.
* :mod:`.ledger_upgrade` -- ledgers written by earlier versions, upgraded in place.
* :mod:`.charge_keys` -- charge and line keys (no content of the data in them).
* :mod:`.charge_summary` -- a run's charges summed for its report and console.

Why low in the layers: the ledger knows amounts, keys and the warehouse, nothing of specs, steps or
bundles; every layer above may charge or read it.

Who may import it: any ``dpcore`` package above it (:mod:`dpcore.release` and up) and
``tasks/``/``flows/``/``dpr/``. It imports :mod:`dpcore.storage` and :mod:`dpcore.runtime` only, and nothing
of its layer's siblings (:mod:`dpcore.explain`, :mod:`dpcore.noise`).
"""
