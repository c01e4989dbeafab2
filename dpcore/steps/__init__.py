"""The pipeline's private steps: each reads the validated table, builds its
ledger charge and calls one mechanism through :meth:`PrivacyLedger.release_once`.

One module per step, with :mod:`.common` (stores, the noise source, charge requests).

Who may import it: :mod:`dpcore.run` and ``tasks/``/``flows/``/``dpr/``. It imports every ``dpcore``
package below it (:mod:`dpcore.publish`, :mod:`dpcore.detect`, :mod:`dpcore.validation`,
:mod:`dpcore.mechanisms`, :mod:`dpcore.ingest`, :mod:`dpcore.release`, :mod:`dpcore.budget`,
:mod:`dpcore.explain`, :mod:`dpcore.noise`, :mod:`dpcore.storage`, :mod:`dpcore.runtime`), never
:mod:`dpcore.run` (``.importlinter``).
"""
