"""A release run end to end: plan its cost, register a dataset, run the stages, record the run.

Owns:

* :mod:`.pipeline` -- the pipeline's stages as plain functions (the Prefect tasks wrap them): preflight,
  ingest, validate, the bundle, and the rejected-rows gate's stop (:func:`~.pipeline.stop_at_gate`).
* :mod:`.cost_plan` -- what a release would charge, line by line, and :func:`~.cost_plan.release_blockers`,
  the one decision of what refuses it (``dpr plan`` and ``dpr run``).
* :mod:`.series_plan` -- the plan of a whole series, period by period (``dpr plan --series``).
* :mod:`.registration` -- the data owner registers a dataset name (``dpr dataset add``).
* :mod:`.release_runs` -- the record of pipeline runs (finished, stopped, left over).
* :mod:`.plan_warnings` -- spec choices that are allowed but uninformative (``dpr plan``).
* :mod:`.operator_values` -- the operator's request values checked against the spec.
* :mod:`.errors` -- expected errors as one line and exit code 2, environment failures as exit code 1.

Why one package: each of these needs the steps (what a release charges is what its steps plan) and
so sits above :mod:`dpcore.steps`. This is the top layer of ``dpcore``.

Who may import it: ``tasks/``, ``flows/``, ``dpr/`` (and tests, benchmarks). No package of ``dpcore``
imports it (``.importlinter``, contract "dpcore's packages").
"""
