"""The pipeline's private steps: each reads the validated table, builds its
ledger charge and calls one mechanism through :meth:`PrivacyLedger.release_once`."""
