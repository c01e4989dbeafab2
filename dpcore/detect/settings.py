"""The detector's settings: one value for every filter of a release.

Seed 004, slide "Outlier Detector Overview": every correlation template is a
filter fitted by the same detector
(:class:`~dpcore.detect.robust_em.RobustRegressionDetector`, the mixture
regression of slide "Parameters Learning"), with the same settings: the EM's
guard and stopping rule, the robust start and its sample, the seed, the
measurement floor of the variance. :class:`DetectorSettings` carries them
from the spec (``steps.detect``) to the in-memory fit
(:func:`~dpcore.detect.combine.fit_template`) and the streamed one
(:func:`~dpcore.detect.streaming.fit_partitions`), so both build the same
detector.

The values are public (they come from the spec). They are not checked here:
the detector's ``fit`` checks its own parameters (scikit-learn style) and
:func:`~dpcore.detect.combine.detector_of` resolves ``sigma2_floor="auto"``.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from .robust_em import RobustRegressionDetector
from .start_sample import START_SAMPLE

if TYPE_CHECKING:
    from dpcore.release.spec import ReleaseSpec

__all__ = ["DetectorSettings"]


@dataclass(frozen=True)
class DetectorSettings:
    """The parameters of :class:`~dpcore.detect.robust_em.RobustRegressionDetector` a filter is fitted with.

    Attributes
    ----------
    random_state : int, numpy Generator or None, default 0
        Seed of the start sample and the robust start.
    max_iter : int, default 200
        EM iteration guard.
    tol : float, default 1e-6
        Stop when the relative log-likelihood change is below ``tol``.
    sigma2_floor : "auto", float or None, default "auto"
        The detector's ``sigma2_floor``; ``"auto"``: from the public schema for
        the template's behavioural attribute
        (:func:`~dpcore.detect.design.sigma2_floor_of`, resolved by
        :func:`~dpcore.detect.combine.detector_of`).
    start : str, default "auto"
        The robust start: ``"auto"`` = FAST-LTS with the inlier-driven EM
        (issue 22), ``"legacy"`` the start before it, ``"lts"``, ``"ols"``.
    n_subsets : int or None, default None
        FAST-LTS elemental subsets; None: the detector's default.
    start_sample : int, default START_SAMPLE
        Rows of the start sample (issue 21).

    Notes
    -----
    Nothing is validated here: the detector's ``fit`` is the one place that
    checks its parameters, and its messages name the parameter.
    """

    random_state: object = 0
    max_iter: int = 200
    tol: float = 1e-6
    sigma2_floor: float | str | None = "auto"
    start: str = "auto"
    n_subsets: int | None = None
    start_sample: int = START_SAMPLE

    @classmethod
    def from_spec(cls, spec: "ReleaseSpec") -> "DetectorSettings":
        """The settings of ``spec.steps.detect``; the floor is ``"auto"`` (from ``spec.public_schema``)."""
        cfg = spec.steps.detect
        return cls(random_state=cfg.random_state, max_iter=cfg.max_iter, tol=cfg.tol, start=cfg.start,
                   n_subsets=cfg.n_subsets, start_sample=cfg.start_sample)

    def detector(self, sigma2_floor: float | None) -> RobustRegressionDetector:
        """An unfitted detector with these settings and a resolved ``sigma2_floor`` (a number or None)."""
        params = {f.name: getattr(self, f.name) for f in fields(self)}
        return RobustRegressionDetector(**{**params, "sigma2_floor": sigma2_floor})
