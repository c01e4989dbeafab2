"""The release definition: what a release is, read from its spec file before any data.

Owns:

* :mod:`.spec` -- the release spec (one YAML file, a pydantic model): dataset, source, public schema,
  steps and their parameters, the budget; :func:`~.spec.load_spec` and its public checks.
* :mod:`.spec_dirs` -- the folders a flow run may load a spec from.
* :mod:`.periods` -- period labels and cadences of a series.
* :mod:`.series` -- a series spec's templates, the period of a run and the series cap.
* :mod:`.path_checks` -- the paths a spec names, refused before a run when they point where they must not.

Everything here is public: a function of the spec and public labels, never of the data.

Who may import it: every package above it -- :mod:`dpcore.ingest`, :mod:`dpcore.detect`,
:mod:`dpcore.validation`, :mod:`dpcore.mechanisms`, :mod:`dpcore.publish`, :mod:`dpcore.steps`,
:mod:`dpcore.run` -- and ``tasks/``/``flows/``/``dpr/``. It imports :mod:`dpcore.budget` (the amounts a
spec states), :mod:`dpcore.explain` (a unit's check), :mod:`dpcore.storage` and :mod:`dpcore.runtime` only.
"""
