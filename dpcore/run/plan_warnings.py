"""Plan-time warnings on parameters that make a release uninformative (issue 32, section 4).

``dpr plan`` prints these (and lists them under ``warnings`` in ``--json``).
Each is a function of the **public** spec only (epsilon, radii, public bounds,
the chosen utility): it reads no data and draws no noise, so printing it
discloses nothing. A warning never stops a release; it says what the owner
will get and how to change it.

Functions
---------
:func:`parameter_warnings`
    Every warning of this module for a spec, as a list of plain sentences.
:func:`aiq_coin_flip_warnings`
    An AIQ per-query epsilon whose worst-case wrong-answer probability
    (:meth:`dpcore.mechanisms.aiq.AnomalyIdentification.max_error_probability`,
    the mechanism's own public formula) is near a coin flip.
:func:`outlier_radius_grid_warnings`
    An outlier-count radius ``r`` below one step of an integer attribute's
    public grid in ``dist_S`` units: then neighbours must share that
    attribute's value exactly, and every rare value is an "outlier".
:func:`pcor_utility_warnings`
    The PCOR ``population`` utility, which favours the widest valid context
    (often the all-``any`` one, which explains nothing); measured in
    ``benchmarks/pcor_default.py`` (BENCHMARKS.md, "PCOR utility default").
"""
from __future__ import annotations

import math

from dpcore.release.spec import ReleaseSpec

__all__ = ["plan_warnings", "parameter_warnings", "aiq_coin_flip_warnings", "outlier_radius_grid_warnings", "pcor_utility_warnings",
           "AIQ_COIN_FLIP"]

#: A worst-case wrong-answer probability at or above this is "near a coin flip" (0.5).
AIQ_COIN_FLIP = 0.4
#: The wrong-answer probability the AIQ warning says how to reach.
AIQ_TARGET = 0.1


def parameter_warnings(spec: ReleaseSpec) -> list[str]:
    """Every parameter warning of this module for ``spec``, from public parameters only.

    Parameters
    ----------
    spec : ReleaseSpec
        A loaded spec; disabled steps give no warning.

    Returns
    -------
    list of str
        Plain sentences naming the spec key and how to change it (empty when
        nothing is worth a warning).
    """
    return aiq_coin_flip_warnings(spec) + outlier_radius_grid_warnings(spec) + pcor_utility_warnings(spec)


def aiq_coin_flip_warnings(spec: ReleaseSpec) -> list[str]:
    """``steps.aiq.epsilon`` whose worst-case error probability is ``>= AIQ_COIN_FLIP``.

    The bound is the mechanism's own public one (``1 / (1 + e^epsilon)``;
    seed 001 Section 4, Construction 1), attained for a record at the anomaly
    boundary; the sentence also gives the epsilon per query that brings it to
    :data:`AIQ_TARGET` (``ln(1/p - 1)``).
    """
    cfg = spec.steps.aiq
    if not cfg.enabled:
        return []
    from dpcore.mechanisms.aiq import AnomalyIdentification

    mech = AnomalyIdentification(cfg.beta, cfg.r, cfg.epsilon, cfg.k, cfg.mechanism)
    p = mech.max_error_probability()
    if p < AIQ_COIN_FLIP:
        return []
    need = math.log(1 / AIQ_TARGET - 1) * (2 if cfg.mechanism == "compiler" else 1)
    return [
        f"steps.aiq.epsilon = {cfg.epsilon:g} (mechanism {cfg.mechanism}): an answer about a record near the "
        f"anomaly boundary is wrong with probability up to {p:.3f}, close to a coin flip (0.5); answers far from "
        f"the boundary are more reliable. An epsilon per query of {need:.2f} brings the worst case to "
        f"{AIQ_TARGET:g} (each query is charged that epsilon)."
    ]


def outlier_radius_grid_warnings(spec: ReleaseSpec) -> list[str]:
    """Integer attributes of ``steps.outlier_counts`` whose public grid step exceeds ``r`` in ``dist_S`` units.

    ``dist_S(x, y) = sqrt(sum_{i in S} (x_i - y_i)^2 / |S|)`` over attributes
    scaled by their public bounds (seed 002, Section 3.1), so two records one
    grid step apart in an integer attribute ``A`` (and equal elsewhere) are
    ``1 / ((max_A - min_A) sqrt(|S|))`` apart. When ``r`` is below that for
    the smallest candidate subspace holding ``A``, a record's neighbours within
    ``r`` must have exactly its value of ``A``: every value held by fewer than
    ``k`` other records is an outlier, whatever the data's shape.
    """
    cfg = spec.steps.outlier_counts
    if not cfg.enabled:
        return []
    numeric = spec.public_schema.numeric
    attrs = list(cfg.attributes if cfg.attributes is not None else numeric)
    if cfg.candidates is not None:
        dims: dict[str, int] = {}
        for sub in cfg.candidates:
            for a in sub:
                dims[a] = min(dims.get(a, len(sub)), len(sub))
    else:
        dims = {a: cfg.subspace_dim for a in attrs}
    out = []
    for a, d in dims.items():
        att = numeric.get(a)
        if att is None or not att.integer or not att.max > att.min:
            continue
        step = 1.0 / ((att.max - att.min) * math.sqrt(d))
        if cfg.r < step:
            # the largest r that still needs exact ties, and the smallest range at which r spans one step
            out.append(
                f"steps.outlier_counts.r = {cfg.r:g} is smaller than one step of the integer attribute {a!r} "
                f"(public bounds {att.min:g} to {att.max:g}: one unit is {step:.3g} in dist_S units for a "
                f"{d}-dimensional subspace): records count as neighbours only with exactly the same {a}, so every "
                f"value of {a} that fewer than k = {cfg.k} other records share is an \"outlier\". Choose r >= "
                f"{step:.3g} (r is in units of the public bounds)."
            )
    return out


def pcor_utility_warnings(spec: ReleaseSpec) -> list[str]:
    """``steps.pcor.utility: population``: it tends to release the all-``any`` context.

    ``|D_C|`` is largest for the widest valid context, so whenever the
    explained record is an outlier of the whole table the exponential
    mechanism favours the context that constrains nothing (measured:
    ``benchmarks/pcor_default.py``, BENCHMARKS.md "PCOR utility default").
    """
    cfg = spec.steps.pcor
    if not cfg.enabled or cfg.utility != "population":
        return []
    return [
        "steps.pcor.utility = population favours the widest valid context: it tends to release the all-'any' "
        "context (every attribute unconstrained), which says only that the record is an outlier of the whole "
        "table. utility: overlap (the default) keeps the released context close to the record's own cell "
        "(BENCHMARKS.md, PCOR utility default)."
    ]


#: The steps whose ``from_detector`` records may be published by ``publish_detector_chosen_ids``.
_DETECTOR_STEPS = ("aiq", "pcor")


def plan_warnings(spec: ReleaseSpec, steps: list[str] | None = None) -> list[str]:
    """The spec's choices that publish something no privacy guarantee covers (issue 28 §4).

    Parameters
    ----------
    spec : ReleaseSpec
    steps : list of str, optional
        The step sections a flow runs; default every enabled step (as
        :func:`dpcore.run.cost_plan.plan_release`).

    Returns
    -------
    list of str
        One sentence per enabled step that sets ``from_detector`` with
        ``publish_detector_chosen_ids: true``, naming the spec key and how to
        turn it off. Empty when nothing unprotected is published on request.
    """
    out = []
    for name in _DETECTOR_STEPS:
        cfg = getattr(spec.steps, name)
        if not cfg.enabled or (steps is not None and name not in steps):
            continue
        if cfg.from_detector and cfg.publish_detector_chosen_ids:
            out.append(
                f"steps.{name}.publish_detector_chosen_ids is on: the release publishes the ids of up to "
                f"{cfg.from_detector} records chosen by the non-private detector (from_detector), and how many it "
                "chose. No guarantee covers that choice: it can name the people with the data's most extreme "
                "values. Set it to false (the default) to keep those answers in the bundle's owner/ folder, at the "
                "same cost."
            )
    return out
