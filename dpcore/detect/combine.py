"""Correlation templates as filters, and their combination.

Seed 004, slide "Outlier Detector Overview": the detector takes the data and
correlation templates :math:`(j, S)`; each template is a *filter* that learns to
predict the behavioural attribute :math:`j` from the contextual attributes
:math:`S`, assigns every record a score :math:`t_i` and estimates the number of
outliers :math:`K`. "A record is marked as outlier if at least one filter marks
it as an outlier" -- :func:`combine`.

Everything returned here is internal (scores, labels, fitted parameters and
diagnostics go to the warehouse's ``internal`` schema only). Diagnostics are
*data* in :attr:`TemplateFit.params` (``converged``, ``n_iter``,
``last_relative_change``, ``diagnostics``), never warnings or log records; the
fit emits no Python warning (DESIGN.md, privacy rule 6; issue 15, hole 12).
Exception messages name the template, its attributes and public parameters,
never data values, row counts or row positions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dpcore.release.spec import PublicSchema
from .design import TRANSFORMS, DesignColumns, apply_transform, design_columns, sigma2_floor_of
from .robust_em import RobustRegressionDetector, model_parameters
from .settings import DetectorSettings
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

__all__ = ["Template", "TemplateFit", "combine", "detector_of", "fit_params", "fit_template", "template_arrays"]


@dataclass(frozen=True)
class Template:
    """A correlation template (j, S): behavioural attribute ``j`` predicted from contexts ``S``.

    Slide "Outlier Detector Overview". ``transforms`` maps attributes of the
    template (behavioural or contextual, numeric) to a transform in
    :data:`~dpcore.detect.design.TRANSFORMS` (``"log"``): the filter models
    ``log(price) ~ log(carat) + ...`` while the records keep their own scale.
    A dict is accepted and stored as sorted ``(attribute, transform)`` pairs.
    """

    name: str
    behavioural: str
    contextual: tuple[str, ...]
    transforms: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.contextual, str):
            raise TypeError("Template.contextual must be a sequence of attribute names, not a string")
        object.__setattr__(self, "contextual", tuple(self.contextual))
        if self.behavioural in self.contextual:
            raise ValueError(f"template {self.name!r}: behavioural attribute {self.behavioural!r} is also contextual")
        tr = dict(self.transforms.items() if isinstance(self.transforms, dict) else self.transforms)
        unknown = sorted(a for a in tr if a != self.behavioural and a not in self.contextual)
        if unknown:
            raise ValueError(f"template {self.name!r}: transforms name attributes {unknown} that are not in the template")
        bad = sorted(a for a, t in tr.items() if t not in TRANSFORMS)
        if bad:
            raise ValueError(f"template {self.name!r}: unknown transform for {bad}; allowed: {list(TRANSFORMS)}")
        object.__setattr__(self, "transforms", tuple(sorted(tr.items())))

    @property
    def transform_of(self) -> dict[str, str]:
        """``transforms`` as a dict (attribute -> transform)."""
        return dict(self.transforms)


@dataclass
class TemplateFit:
    """One fitted filter.

    Attributes
    ----------
    template : Template
    scores : ndarray of shape (n,)
        Posterior outlier log-odds (the detector's ``decision_scores_``; higher = more anomalous), aligned with the input rows.
    labels : ndarray of int, shape (n,)
        1 for the filter's top ``K`` records.
    params : dict
        Plain-JSON fitted parameters: ``template``, ``behavioural``,
        ``contextual``, ``transforms`` (attribute -> transform), ``features``
        (design-matrix column names), ``coef`` (list aligned with ``features``,
        units of the (transformed) ``y`` per bound-scaled or transformed context), ``intercept``, ``sigma2``,
        ``sigma2_floor`` (the measurement floor passed to the detector, None when none), ``p``, ``b``, ``n_iter``,
        ``converged``, ``last_relative_change``, ``K``, ``threshold`` (None when
        K = 0), ``log_likelihood`` (None when infinite), ``n_rows``, ``diagnostics``
        (the detector's ``diagnostics_``: a list of dicts with a ``"code"``,
        e.g. ``{"code": "not_converged", "n_iter": ..., "max_iter": ..., "tol": ...,
        "last_relative_change": ...}``). All of it is private: the detect step
        writes it to ``internal.detect_models`` only.
    """

    template: Template
    scores: np.ndarray
    labels: np.ndarray
    params: dict = field(default_factory=dict)


def _finite_or_none(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def template_arrays(df: pd.DataFrame, template: Template, schema: PublicSchema) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The filter's regression data: design matrix, behavioural values (both transformed), column names.

    Parameters
    ----------
    df : pandas.DataFrame
    template : Template
    schema : dpcore.release.spec.PublicSchema

    Returns
    -------
    X : ndarray of shape (n, n_columns)
        :func:`~dpcore.detect.design.design_matrix` of the contexts, with the template's transforms.
    y : ndarray of shape (n,)
        The behavioural attribute, transformed if the template says so.
    names : list of str
        Column names of ``X``.

    Raises
    ------
    KeyError, ValueError
        As :func:`fit_template` (unknown attributes, non-numeric behavioural
        attribute, missing values, ``log`` of non-positive values, ...). The
        messages name the template and the attribute, never values, counts or
        row positions.
    """
    cols, y = template_encoded(df, template, schema)
    return cols.toarray(), y, cols.names


def template_encoded(df: pd.DataFrame, template: Template, schema: PublicSchema) -> tuple[DesignColumns, np.ndarray]:
    """:func:`template_arrays` before the categorical codes are spread into indicator columns.

    Returns the contexts as :class:`~dpcore.detect.design.DesignColumns`
    (``toarray()`` is :func:`template_arrays`' ``X``, bit for bit) and the
    behavioural values ``y``; same checks and errors as :func:`template_arrays`.
    """
    j = template.behavioural
    if j not in schema.numeric:
        if j in schema.categorical:
            raise ValueError(f"template {template.name!r}: behavioural attribute {j!r} must be numeric, it is categorical")
        raise KeyError(f"template {template.name!r}: behavioural attribute {j!r} is not declared in the public schema")
    if j not in df.columns:
        raise KeyError(f"template {template.name!r}: behavioural attribute {j!r} is not a column of the data frame")
    tr = template.transform_of
    cols = design_columns(df, list(template.contextual), schema, tr)
    y = pd.to_numeric(df[j], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    if not np.isfinite(y).all():
        raise ValueError(f"template {template.name!r}: behavioural attribute {j!r} has missing or non-numeric values")
    try:
        y = apply_transform(y, j, tr.get(j))
    except ValueError as exc:
        raise ValueError(f"template {template.name!r}: behavioural {exc}") from None
    return cols, y


def fit_template(
    df: pd.DataFrame,
    template: Template,
    schema: PublicSchema,
    settings: DetectorSettings = DetectorSettings(),
) -> TemplateFit:
    """Fit one filter: :class:`RobustRegressionDetector` of ``df[behavioural]`` on the encoded contexts.

    Parameters
    ----------
    df : pandas.DataFrame
        Complete rows (no missing values in the template's attributes).
    template : Template
    schema : dpcore.release.spec.PublicSchema
        Public bounds and domains used by :func:`~dpcore.detect.design.design_matrix`.
    settings : DetectorSettings, optional
        The detector's parameters (default: its defaults). Their
        ``sigma2_floor="auto"`` (default) derives the floor from the schema
        for the behavioural attribute (:func:`~dpcore.detect.design.sigma2_floor_of`:
        ``1/12`` for ``integer: true`` without a transform, else None).

    Returns
    -------
    TemplateFit

    Raises
    ------
    KeyError
        Unknown attribute (not in the schema or not a column of ``df``).
    ValueError
        Behavioural attribute not numeric in the schema or with missing /
        non-numeric values; encoding errors (see ``design_matrix``); detector
        errors, prefixed with the template's name (e.g. "template 'x': too few
        rows to fit the regression: fewer rows than the model's 7 parameters
        ..."). No message carries a data value, a row count or a row position.

    Notes
    -----
    Emits no warning and logs nothing: non-convergence and the other detector
    diagnostics are returned as data in ``params`` (``converged``,
    ``diagnostics``, ...), for ``internal.detect_models``. No process-global
    warning state is touched, so concurrent calls (Prefect's thread pool) are safe.
    """
    X, y, names = template_arrays(df, template, schema)
    det, sigma2_floor = detector_of(template, schema, settings)
    try:
        det.fit(X, y)
    except ValueError as exc:  # the detector's messages are generic; name the template
        raise ValueError(f"template {template.name!r}: {exc}") from None
    params = fit_params(template, det, names, sigma2_floor, len(y), det.threshold_)
    return TemplateFit(template=template, scores=det.decision_scores_, labels=det.labels_, params=params)


def fit_params(template: Template, det: RobustRegressionDetector | None, names: list[str], sigma2_floor,
               n_rows: int, threshold, unfitted: str = "too_few_rows") -> dict:
    """The plain-JSON params of a fitted filter (:class:`TemplateFit`), in-memory or streamed alike.

    ``threshold``: the score of the K-th record (``inf``/None when K = 0; the
    streamed fit learns it from the warehouse after scoring). ``det=None``:
    the unfitted filter of a table with fewer rows than the model has
    parameters, or whose spread leaves no finite scale
    (:func:`~dpcore.detect.streaming.fit_partitions`): zero coefficients, no
    noise parameters, ``K = 0`` and the diagnostic ``unfitted`` (the code:
    ``too_few_rows``, with the model's parameter count, or a
    :class:`~dpcore.detect.robust_em.DataSpreadError` code).
    """
    j = template.behavioural
    fitted = det is not None
    return {
        "template": template.name,
        "behavioural": j,
        "contextual": list(template.contextual),
        "transforms": template.transform_of,
        "features": list(names),
        "coef": [float(c) for c in det.coef_] if fitted else [0.0] * len(names),
        "intercept": float(det.intercept_) if fitted else 0.0,
        "sigma2": float(det.sigma2_) if fitted else None,
        "sigma2_floor": None if sigma2_floor is None else float(sigma2_floor),
        "p": float(det.p_) if fitted else None,
        "b": float(det.b_) if fitted else None,
        "n_iter": int(det.n_iter_) if fitted else 0,
        "converged": bool(det.converged_) if fitted else False,
        "last_relative_change": float(det.last_relative_change_) if fitted else None,
        "K": int(det.K_) if fitted else 0,
        "threshold": None if threshold is None else _finite_or_none(threshold),
        "log_likelihood": _finite_or_none(det.log_likelihood_) if fitted else None,
        "n_rows": int(n_rows),
        "diagnostics": ([dict(d) for d in det.diagnostics_] if fitted
                        else [{"code": "too_few_rows", "n_params": model_parameters(len(names))}
                              if unfitted == "too_few_rows" else {"code": unfitted}]),
    }


def detector_of(template: Template, schema: PublicSchema,
                settings: DetectorSettings = DetectorSettings()) -> tuple[RobustRegressionDetector, float | None]:
    """The template's detector (unfitted) and its ``sigma2_floor`` (``"auto"``: from the schema)."""
    j = template.behavioural
    sigma2_floor = settings.sigma2_floor
    if isinstance(sigma2_floor, str):
        if sigma2_floor != "auto":
            raise ValueError(f"sigma2_floor must be 'auto', None or a number >= 0, got {sigma2_floor!r}")
        sigma2_floor = sigma2_floor_of(j, schema, template.transform_of.get(j))
    return settings.detector(sigma2_floor), sigma2_floor


def combine(fits: list[TemplateFit]) -> tuple[np.ndarray, np.ndarray]:
    """Combine filters: a record is an outlier if at least one filter marks it.

    Slide "Outlier Detector Overview".

    Parameters
    ----------
    fits : list of TemplateFit
        Fits on the same rows, in the same order.

    Returns
    -------
    any_label : ndarray of int (0/1), shape (n,)
        1 where at least one filter labels the record.
    max_score : ndarray of float, shape (n,)
        The largest :math:`t_i` over the filters.

    Raises
    ------
    ValueError
        No fits, or fits of different lengths (the message states no lengths:
        they are row counts).
    """
    fits = list(fits)
    if not fits:
        raise ValueError("combine needs at least one TemplateFit")
    if len({len(f.scores) for f in fits}) != 1 or any(len(f.labels) != len(f.scores) for f in fits):
        raise ValueError(
            f"fits must score the same rows (one score and one label per row); templates: {[f.template.name for f in fits]}"
        )
    labels = np.vstack([np.asarray(f.labels) for f in fits])
    scores = np.vstack([np.asarray(f.scores, dtype=np.float64) for f in fits])
    return labels.any(axis=0).astype(np.int64), scores.max(axis=0)
