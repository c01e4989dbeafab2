"""Category text inside rendered identifiers and reports: quoting and escaping.

Category values are public (they come from the spec's domains and the public
groups file) but may hold any text: ``Unemployed, Laid Off``,
``Washington, D.C.``, leading or trailing spaces, quotes, ``=``, braces,
unicode, line breaks. Two places write them into text that must be read back
or displayed:

* identifiers that are parsed again (PCOR contexts,
  :mod:`dpcore.mechanisms.pcor.contexts`; count-of-counts node ids,
  :mod:`dpcore.mechanisms.coco.hierarchy`). There a value is written bare
  when it cannot be mistaken for the surrounding syntax (so the usual plain
  values render exactly as before) and otherwise as a JSON string literal
  (:func:`quote`), which handles quotes, backslashes and line breaks;
  :func:`read_quoted` reads one back.
* Markdown table cells of the report (:func:`md_cell`), where ``|`` or a line
  break in a value would break the table.

One more quoting lives here because every package writes it: a path (or other
text) as an SQL string literal of DuckDB (:func:`sql_text`).

Nothing here changes a value: quoting and escaping are undone exactly by
:func:`read_quoted` and by a Markdown renderer.
"""
from __future__ import annotations

import json

__all__ = ["needs_quotes", "quote", "read_quoted", "md_cell", "sql_text"]

_DECODER = json.JSONDecoder()


def needs_quotes(text: str, specials: str = "", reserved: tuple[str, ...] = ()) -> bool:
    """Whether ``text`` must be quoted to be read back unambiguously (and seen exactly).

    Parameters
    ----------
    text : str
        The value as text.
    specials : str
        Characters the surrounding syntax uses as delimiters.
    reserved : tuple of str
        Whole words the surrounding syntax gives a meaning (e.g. ``any``).

    Returns
    -------
    bool
        True when ``text`` is empty, has leading or trailing whitespace,
        starts with ``"`` (the quote that opens a quoted value), holds a
        character that is not printable (line breaks, tabs, no-break or
        zero-width spaces, control characters), holds one of ``specials``,
        or is one of ``reserved``.
    """
    return (
        text == ""
        or text != text.strip()
        or text[0] == '"'
        or not text.isprintable()
        or text in reserved
        or any(c in text for c in specials)
    )


def _escape_char(c: str) -> str:
    o = ord(c)
    if o < 0x10000:
        return f"\\u{o:04x}"
    o -= 0x10000
    return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"


def quote(text: str) -> str:
    """``text`` as a JSON string literal whose every character is visible.

    Quotes, backslashes and control characters are escaped as JSON does; any
    other character that is not printable (no-break space, zero-width space,
    line separator, ...) is written as a ``\\uXXXX`` escape so that a reader
    sees it. Other unicode is kept as is (``"Zürich"``).

    Parameters
    ----------
    text : str

    Returns
    -------
    str
        A JSON string literal; ``json.loads(quote(t)) == t`` for every ``t``.
    """
    body = json.dumps(text, ensure_ascii=False)
    if body.isprintable():
        return body
    return "".join(c if c.isprintable() else _escape_char(c) for c in body)


def read_quoted(text: str, pos: int) -> tuple[str, int]:
    """Read the JSON string literal that starts at ``text[pos]`` (a ``"``).

    Parameters
    ----------
    text : str
    pos : int
        Index of the opening quote.

    Returns
    -------
    (str, int)
        The decoded value and the index just after the closing quote.

    Raises
    ------
    ValueError
        No well-formed JSON string literal starts at ``pos`` (unclosed quote,
        bad escape).
    """
    if not text.startswith('"', pos):
        raise ValueError(f"expected a quoted value at {text[pos:pos + 20]!r}")
    try:
        value, end = _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise ValueError(f"malformed quoted value {text[pos:pos + 40]!r}: {exc.msg}") from None
    return value, end


#: Characters that Markdown gives a meaning inside a table cell; each is backslash-escaped.
_MD_PUNCT = set("\\|`*_[]~$")


def md_cell(text: object) -> str:
    """Text for one cell of a Markdown (GFM) table that renders as exactly ``text``.

    ``|`` (the cell delimiter) and the emphasis, code, link, strikethrough and
    math characters are backslash-escaped, ``&`` and ``<`` are written as
    entities (no HTML is injected), and each line break becomes ``<br>`` (a
    table row is one line).

    Parameters
    ----------
    text : object
        Converted with ``str``.

    Returns
    -------
    str
        One line.
    """
    s = str(text)
    out = []
    for c in s.replace("\r\n", "\n").replace("\r", "\n"):
        if c in _MD_PUNCT:
            out.append("\\" + c)
        elif c == "&":
            out.append("&amp;")
        elif c == "<":
            out.append("&lt;")
        elif c == "\n":
            out.append("<br>")
        else:
            out.append(c)
    return "".join(out)


def sql_text(text: object) -> str:
    """``str(text)`` as an SQL string literal (single quotes, each inner quote doubled), e.g. a file's path in
    DuckDB's ``read_parquet('...')`` or ``COPY ... TO '...'``."""
    return "'" + str(text).replace("'", "''") + "'"
