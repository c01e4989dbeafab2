"""Warnings ``dpr plan`` prints about a spec: choices that publish what no guarantee covers (issue 28).

The cost plan (:mod:`dpcore.cost_plan`) says what a release charges; this
module says what a release would publish *unprotected* because the spec
asked for it. Today one such switch exists: ``publish_detector_chosen_ids``
of ``steps.aiq`` and ``steps.pcor``, which publishes the ids of the records
the non-private detector chose (``from_detector``). A function of the spec
alone: it reads no data and no ledger.
"""
from __future__ import annotations

from .spec import ReleaseSpec

__all__ = ["plan_warnings"]

#: The steps whose ``from_detector`` records may be published by ``publish_detector_chosen_ids``.
_DETECTOR_STEPS = ("aiq", "pcor")


def plan_warnings(spec: ReleaseSpec, steps: list[str] | None = None) -> list[str]:
    """The spec's choices that publish something no privacy guarantee covers.

    Parameters
    ----------
    spec : ReleaseSpec
    steps : list of str, optional
        The step sections a flow runs; default every enabled step (as
        :func:`dpcore.cost_plan.plan_release`).

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
