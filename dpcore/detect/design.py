"""Design matrix of a correlation template's contextual attributes, from the *public* schema.

Seed 004, slide "Mixture Model": the filter predicts :math:`y_i` from the vector
:math:`\\vec x_i` of contextual attribute values in :math:`S`. Categorical
contexts enter as one-hot indicators, numeric ones as numbers. Both encodings
use public metadata only (DESIGN.md, "The release spec"): numeric attributes are
scaled to [0, 1] by their public bounds and the one-hot levels are the full
public domain, so the columns (and their names) do not depend on which values
happen to occur in the private data. A level absent from the data gives an
all-zero column, which the fitter drops (coefficient 0).

Error messages name the attribute and the rule, never the offending values,
how many rows break it or where (DESIGN.md, privacy rule 6; issue 15, hole 12:
row counts and positions of the validated table are private too). Nothing here
warns or logs; the code avoids the conditions under which numpy or pandas would
warn (e.g. casting floats outside the int64 range).
"""
from __future__ import annotations

import numpy as np

from dpcore.release.spec import PublicSchema
from dpcore.runtime.lazy_modules import lazy_module

pd = lazy_module("pandas")  # imported on first use: `dpr spec check` and `dpr plan` never load it

__all__ = ["TRANSFORMS", "DesignColumns", "apply_transform", "design_columns", "design_matrix", "sigma2_floor_of"]

#: Per-attribute transforms a correlation template may declare (numeric attributes only).
TRANSFORMS = ("log",)


def _as_text(col: pd.Series) -> np.ndarray:
    """Cell values as text the way the domain is written (``str(value)``).

    Whole-number floats (an integer column that passed through a float dtype)
    are written without the ``.0`` so they compare equal to integer domains
    (only within the int64 range: casting beyond it is undefined and makes
    numpy warn; such values take the general ``str()`` path).
    """
    if pd.api.types.is_float_dtype(col.dtype):
        v = col.to_numpy(dtype=np.float64, na_value=np.nan)
        if np.all(np.isfinite(v) & (v == np.round(v)) & (np.abs(v) < 2.0**63)):
            return v.astype(np.int64).astype(str).astype(object)
    elif pd.api.types.is_integer_dtype(col.dtype) and not col.isna().any():
        return col.to_numpy(dtype=np.int64).astype(str).astype(object)
    elif isinstance(col.dtype, pd.StringDtype) and not col.isna().any():
        return col.to_numpy(dtype=object)
    # general case (object, bool, categorical, with missing values): str() of each
    # non-missing value, missing -> None (never in a domain)
    obj = col.astype(object)
    out = obj.map(str).to_numpy(dtype=object)
    out[col.isna().to_numpy()] = None
    return out


def _domain_codes(col: pd.Series, domain: list[str]) -> np.ndarray:
    """Each cell's position in ``domain`` (-1: missing or not in it), as ``pd.Categorical(_as_text(col), domain).codes``.

    A text column (pandas' ``str`` dtype, as the detection export reads) is looked up by Arrow's
    ``index_in`` (a hash lookup in C++, without the per-cell Python strings of the general path: about
    a sixth of a streamed fit's passes over the chunks, issue 29); any other column, or a domain listing
    a value twice, takes the general path.
    """
    if isinstance(col.dtype, pd.StringDtype) and len(set(domain)) == len(domain):
        import pyarrow as pa
        import pyarrow.compute as pc

        text = pa.array(col, type=pa.string(), from_pandas=True)
        idx = pc.index_in(text, value_set=pa.array(domain, type=pa.string()))
        return pc.fill_null(idx, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    return pd.Categorical(_as_text(col), categories=domain).codes.astype(np.int64)


def sigma2_floor_of(attribute: str, schema: PublicSchema, transform: str | None = None) -> float | None:
    r"""Measurement floor of the inlier variance for a behavioural attribute, from the public schema.

    Seed 004, slide "Parameters Learning" (the M-step of :math:`\sigma^2`): a
    value recorded to resolution :math:`h` carries a rounding error uniform on
    :math:`\pm h/2`, variance :math:`h^2/12` (Sheppard's correction), so no fit
    of the recorded values has a smaller inlier variance. The spec declares the
    resolution of whole-number attributes (``integer: true``, :math:`h = 1`).
    Passed to :class:`~dpcore.detect.robust_em.RobustRegressionDetector` as
    ``sigma2_floor``.

    Parameters
    ----------
    attribute : str
        The template's behavioural attribute.
    schema : dpcore.release.spec.PublicSchema
    transform : {None, "log"}
        The template's transform of ``attribute``.

    Returns
    -------
    float or None
        ``1/12`` for an untransformed numeric attribute declared ``integer: true``;
        ``None`` (no measurement floor, only the detector's numeric one) otherwise:
        attributes without a declared resolution, categorical or unknown
        attributes (the template's own checks report those), and **transformed**
        attributes. Under ``log`` the rounding error becomes :math:`u/y`, variance
        :math:`1/(12y^2)`, different for every row; the only floor valid for all
        rows, :math:`1/(12\max y^2)`, is negligible next to the numeric floor at
        realistic scales, so none is applied.
    """
    attr = schema.numeric.get(attribute)
    if attr is None or not attr.integer or transform is not None:
        return None
    return 1.0 / 12.0


def apply_transform(values: np.ndarray, attribute: str, transform: str | None) -> np.ndarray:
    """Apply a template's per-attribute transform to finite numeric values.

    Seed 004, slide "Mixture Model": the filter is linear in whatever scale the
    template declares; a ``log`` transform models a multiplicative relation
    (price ~ carat**k) linearly. The data (and any perturbation of it) stay on
    their own scale; only the model sees the transformed values.

    Parameters
    ----------
    values : ndarray of float
        Finite values of ``attribute``.
    attribute : str
        Its name (for error messages only).
    transform : {None, "log"}
        ``None`` returns ``values`` unchanged.

    Returns
    -------
    ndarray of float

    Raises
    ------
    ValueError
        Unknown transform, or ``log`` of zero / negative values (the message names
        the attribute, never values, counts or row positions).
    """
    if transform is None:
        return values
    if transform not in TRANSFORMS:
        raise ValueError(f"attribute {attribute!r}: unknown transform {transform!r}; allowed: {list(TRANSFORMS)}")
    if not np.all(values > 0):
        raise ValueError(f"attribute {attribute!r}: the log transform needs positive values; some are zero or negative")
    return np.log(values)


def design_matrix(
    df: pd.DataFrame, contextual: list[str], schema: PublicSchema, transforms: dict[str, str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """Encode the contextual attributes of ``df`` as a float matrix.

    Parameters
    ----------
    df : pandas.DataFrame
        The records (one row each); must hold every attribute in ``contextual``.
    contextual : list of str
        Contextual attributes :math:`S` of the template, in order.
    schema : dpcore.release.spec.PublicSchema
        The public schema: numeric bounds and categorical domains.
    transforms : dict of str to str, optional
        Per-attribute transforms (:data:`TRANSFORMS`) of numeric contexts, see
        :func:`apply_transform`. Bounds are checked on the raw values; a
        transformed attribute ``c`` gives the column ``log(c)`` (unscaled: the
        detector standardises its columns).

    Returns
    -------
    X : ndarray of shape (len(df), n_columns), float64
        Numeric attribute ``c``: ``(x - min) / (max - min)`` with the public
        bounds, one column named ``c``. Categorical attribute ``c`` with public
        domain ``v0, v1, ..., vL``: ``L`` indicator columns named ``c=v1`` ...
        ``c=vL`` (the first level is the reference; the intercept is separate).
    names : list of str
        Column names, in column order.

    Raises
    ------
    KeyError
        An attribute is not declared in the schema or is not a column of ``df``.
    ValueError
        Duplicate attributes; a numeric value that is missing, non-numeric or
        outside the public bounds; a categorical value that is missing or not in
        the public domain (values compared as ``str(value)``); a transform of a
        categorical attribute, an unknown transform, ``log`` of a non-positive
        value. The message names the attribute and the rule, never the values,
        the number of offending rows or their positions.
    """
    cols = design_columns(df, contextual, schema, transforms)
    return cols.toarray(), cols.names


class DesignColumns:
    """A design matrix as its attributes' encoded columns: numbers and level codes (issue 29).

    What :func:`design_matrix` builds before it spreads the categorical codes
    into one-hot columns: for each contextual attribute, in order, either the
    numeric column's values (already scaled by the public bounds or
    transformed) or the positions of the cells' values in the public domain
    (``0`` the reference level, ``1..L`` the ``L`` indicator columns). A byte
    or two per categorical cell instead of eight per indicator, so a streamed
    fit can keep a chunk's encoded rows between its passes over the chunks
    (:class:`dpcore.detect.streaming.PartitionChunks`) instead of decoding
    Parquet and looking up the domains again. :meth:`toarray` gives the
    design matrix, the same values bit for bit.

    Parameters
    ----------
    widths : tuple of (int or None)
        Per attribute: None for a numeric attribute (one column), else its
        number of indicator columns ``L`` (domain size - 1; 0 for a one-level domain).
    columns : tuple of ndarray
        Per attribute: float64 values (numeric) or integer codes in ``0..L``.
    names : list of str
        The design's column names (as :func:`design_matrix` returns them).
    n : int
        Rows.
    """

    def __init__(self, widths, columns, names, n: int) -> None:
        self.widths, self.columns, self.names, self.n = tuple(widths), tuple(columns), list(names), int(n)

    @property
    def n_columns(self) -> int:
        return sum(1 if w is None else w for w in self.widths)

    def take(self, rows: np.ndarray) -> "DesignColumns":
        """The rows at positions ``rows``."""
        return DesignColumns(self.widths, [c[rows] for c in self.columns], self.names, len(rows))

    def toarray(self) -> np.ndarray:
        """The design matrix (float64, C order): numbers as they are, each code ``a > 0`` a 1 in its level's column."""
        X = np.zeros((self.n, self.n_columns))
        at = 0
        for w, col in zip(self.widths, self.columns):
            if w is None:
                X[:, at] = col
                at += 1
                continue
            codes = col.astype(np.int64, copy=False)
            sel = codes > 0
            X[np.flatnonzero(sel), at + codes[sel] - 1] = 1.0
            at += w
        return X


def _code_dtype(levels: int):
    """The smallest unsigned integer type holding codes ``0..levels``."""
    return np.uint8 if levels < 2**8 else np.uint16 if levels < 2**16 else np.int64


def design_columns(
    df: pd.DataFrame, contextual: list[str], schema: PublicSchema, transforms: dict[str, str] | None = None
) -> DesignColumns:
    """:func:`design_matrix`'s checks and encoding, without spreading the codes into indicator columns.

    Parameters, errors: as :func:`design_matrix`. Returns
    :class:`DesignColumns` (``toarray()`` is :func:`design_matrix`'s ``X``).
    """
    transforms = dict(transforms or {})
    if isinstance(contextual, str):
        raise TypeError("contextual must be a list of attribute names, not a single string")
    contextual = list(contextual)
    dup = sorted({c for c in contextual if contextual.count(c) > 1})
    if dup:
        raise ValueError(f"contextual attributes must be distinct; repeated: {dup}")
    n = len(df)
    widths: list[int | None] = []
    columns: list[np.ndarray] = []
    names: list[str] = []
    for c in contextual:
        if c not in schema.numeric and c not in schema.categorical:
            raise KeyError(f"contextual attribute {c!r} is not declared in the public schema")
        if c not in df.columns:
            raise KeyError(f"contextual attribute {c!r} is not a column of the data frame")
        if c in schema.numeric:
            attr = schema.numeric[c]
            v = pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
            if not np.isfinite(v).all():
                raise ValueError(f"numeric attribute {c!r}: some values are missing or not finite numbers")
            if np.any((v < attr.min) | (v > attr.max)):
                raise ValueError(f"numeric attribute {c!r}: some values lie outside the public bounds [min, max]")
            if c in transforms:
                columns.append(np.ascontiguousarray(apply_transform(v, c, transforms[c]), dtype=np.float64))
                names.append(f"{transforms[c]}({c})")
            else:
                columns.append((v - attr.min) / attr.width)
                names.append(c)
            widths.append(None)
        else:
            if c in transforms:
                raise ValueError(f"categorical attribute {c!r} cannot take the transform {transforms[c]!r}")
            domain = schema.categorical[c].domain_strings
            codes = _domain_codes(df[c], domain)
            if np.any(codes < 0):
                raise ValueError(f"categorical attribute {c!r}: some values are missing or outside the public domain")
            columns.append(codes.astype(_code_dtype(len(domain) - 1)))
            widths.append(len(domain) - 1)
            names.extend(f"{c}={v}" for v in domain[1:])
    return DesignColumns(widths, columns, names, n)
