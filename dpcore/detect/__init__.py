"""Non-private, internal outlier detection (seed 004 part 1, "Detecting Outliers with Correlated Measures").

* :mod:`.robust_em` -- :class:`RobustRegressionDetector`, one filter: Gaussian/Cauchy
  mixture regression fitted by EM from a robust start.
  Its parts (issues 29 and 49): :mod:`.mixture_em` (the EM core: E-step, M-step, SQUAREM),
  :mod:`.robust_start` (FAST-LTS and the EM's start), :mod:`.start_sample` (the rows the
  scaling and the start see), :mod:`.em_passes` (the passes over chunks of rows),
  :mod:`.level_design` (one-hot blocks as per-level sums) and :mod:`.labels` (the top
  ``K`` records, ties by lower row).
* :mod:`.design` -- :func:`design_matrix`, contexts encoded from the *public* schema, with a
  template's per-attribute transforms (:func:`apply_transform`, ``log``).
* :mod:`.combine` -- :class:`Template`, :func:`fit_template` and :func:`combine` ("a record
  is an outlier if at least one filter marks it", slide "Outlier Detector Overview").
* :mod:`.settings` -- :class:`DetectorSettings`, the detector's parameters from the spec, one
  value for the in-memory and the streamed fit.
* :mod:`.streaming` -- the fit and the scoring streamed over Parquet chunks of a warehouse
  export (issue 21), the same fit as :func:`fit_template`.

Everything here is internal: scores and labels never leave the warehouse.
Diagnostics (non-convergence, ...) are data on the fitted detector and in
:attr:`TemplateFit.params`, stored in the warehouse's ``internal`` schema; nothing
here warns or logs, and exception messages carry no data values, row counts or
row positions (DESIGN.md, privacy rule 6).

Who may import it: :mod:`dpcore.steps`, :mod:`dpcore.run` and ``tasks/``/``flows/``. It imports
:mod:`dpcore.release`, :mod:`dpcore.storage` and :mod:`dpcore.runtime` only (nothing of its layer's
siblings :mod:`dpcore.publish`, :mod:`dpcore.validation`, :mod:`dpcore.mechanisms`).
"""
from .combine import Template, TemplateFit, combine, fit_template, template_arrays
from .design import TRANSFORMS, apply_transform, design_matrix, sigma2_floor_of
from .robust_em import RobustRegressionDetector
from .settings import DetectorSettings

__all__ = [
    "TRANSFORMS",
    "sigma2_floor_of",
    "RobustRegressionDetector",
    "DetectorSettings",
    "Template",
    "TemplateFit",
    "combine",
    "design_matrix",
    "fit_template",
    "template_arrays",
    "apply_transform",
]
