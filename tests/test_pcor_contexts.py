"""PCOR contexts (seed 003, Section 3): bit layout, packing, rendering round trips, record encoding."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcore.mechanisms.pcor.contexts import ContextSpace

CARRIERS = ["9E", "AA", "AS", "B6", "DL", "EV", "F9", "FL", "HA", "MQ", "OO", "UA", "US", "VX", "WN", "YV"]


@pytest.fixture(scope="module")
def flights_space() -> ContextSpace:
    return ContextSpace.from_domains(["carrier", "origin", "month"],
                                     [CARRIERS, ["EWR", "JFK", "LGA"], list(range(1, 13))])


def _ctx(space: ContextSpace, chosen: dict) -> np.ndarray:
    c = np.zeros(space.t, dtype=bool)
    for i, (a, dom) in enumerate(zip(space.attributes, space.domains)):
        for v in chosen.get(a, dom):
            c[space.offsets[i] + list(dom).index(v)] = True
    return c


# ---------------------------------------------------------------- layout


def test_layout(flights_space):
    sp = flights_space
    assert sp.t == 31 and sp.m == 3
    assert sp.sizes.tolist() == [16, 3, 12]
    assert sp.offsets.tolist() == [0, 16, 19]
    assert sp.attribute_of_bit.tolist() == [0] * 16 + [1] * 3 + [2] * 12


def test_paper_example_bit_vector():
    # Section 3: [P11 v P13] ^ [P23] ^ [P32] over Jobtitle x City x District is <101001010>
    sp = ContextSpace.from_domains(["Jobtitle", "City", "District"],
                                   [["CEO", "MedicalDoctor", "Lawyer"], ["Montreal", "Ottawa", "Toronto"],
                                    ["Business", "Historic", "Diplomatic"]])
    c = sp.parse("Jobtitle ∈ {CEO, Lawyer} ∧ City = Toronto ∧ District = Historic")
    assert sp.bitstring(c) == "101001010"
    assert (sp.from_bitstring("101001010") == c).all()


@pytest.mark.parametrize("attrs,domains,msg", [
    ([], [], "at least one attribute"),
    (["a", "a"], [[1], [2]], "distinct"),
    (["a"], [[]], "empty"),
    (["a"], [[1, 1]], "repeated"),
    (["a"], [[1, "1"]], "same text form"),
    (["a", "b"], [list(range(40)), list(range(25))], "t = 65"),
])
def test_from_domains_rejects(attrs, domains, msg):
    with pytest.raises(ValueError, match=msg):
        ContextSpace.from_domains(attrs, domains)


def test_t_64_allowed_and_packs():
    sp = ContextSpace.from_domains(["a", "b"], [list(range(32)), [f"v{i}" for i in range(32)]])
    assert sp.t == 64
    c = np.ones(64, dtype=bool)
    k = sp.pack(c)
    assert k.dtype == np.uint64 and int(k[0]) == 2 ** 64 - 1
    assert (sp.unpack(k)[0] == c).all()


# ---------------------------------------------------------------- packing


def test_pack_bit_order(flights_space):
    sp = flights_space
    for i in [0, 7, 8, 15, 16, 30]:
        c = np.zeros(sp.t, dtype=bool)
        c[i] = True
        assert int(sp.pack(c)[0]) == 1 << i


def test_pack_unpack_round_trip(flights_space):
    rng = np.random.default_rng(3)
    ctx = rng.random((500, flights_space.t)) < 0.5
    keys = flights_space.pack(ctx)
    assert keys.shape == (500,) and keys.dtype == np.uint64
    assert (flights_space.unpack(keys) == ctx).all()
    # equal to the arithmetic definition sum_i c_i 2^i
    assert [int(k) for k in keys] == [sum(1 << i for i in np.flatnonzero(c)) for c in ctx]


def test_unpack_rejects_bits_beyond_t(flights_space):
    with pytest.raises(ValueError, match="beyond t"):
        flights_space.unpack(np.array([1 << 40], dtype=np.uint64))


def test_bad_context_shape(flights_space):
    with pytest.raises(ValueError, match=r"\(B, 31\)"):
        flights_space.pack(np.zeros((2, 30), dtype=bool))
    with pytest.raises(ValueError, match="0/1"):
        flights_space.pack(np.full((1, 31), 2))


def test_bitstring_errors(flights_space):
    with pytest.raises(ValueError, match="31 characters"):
        flights_space.from_bitstring("0101")
    with pytest.raises(ValueError, match="31 characters"):
        flights_space.from_bitstring("2" * 31)


# ---------------------------------------------------------------- rendering


def test_render_issue_example(flights_space):
    sp = flights_space
    c = _ctx(sp, {"carrier": ["AA", "UA"], "origin": ["JFK"], "month": [1, 2]})
    assert sp.render(c) == "carrier ∈ {AA, UA} ∧ origin = JFK ∧ month ∈ {1, 2}"
    assert (sp.parse("carrier ∈ {AA, UA} ∧ origin = JFK ∧ month ∈ {1, 2}") == c).all()
    # issue 6 writes the values in another order; parsing takes sets, rendering uses domain order
    assert (sp.parse("carrier ∈ {UA, AA} ∧ origin = JFK ∧ month ∈ {1, 2}") == c).all()


def test_render_full_and_empty_attribute(flights_space):
    sp = flights_space
    c = _ctx(sp, {"carrier": ["DL"], "origin": []})
    assert sp.render(c) == "carrier = DL ∧ origin ∈ ∅ ∧ month: any"
    assert (sp.parse(sp.render(c)) == c).all()
    assert sp.render(np.ones(sp.t, dtype=bool)) == "carrier: any ∧ origin: any ∧ month: any"


def test_parse_any_order_and_values_are_domain_values(flights_space):
    sp = flights_space
    c = sp.parse("month = 3 ∧ origin: any ∧ carrier ∈ {9E, YV}")
    assert sp.render(c) == "carrier ∈ {9E, YV} ∧ origin: any ∧ month = 3"
    month_bits = c[sp.offsets[2]: sp.offsets[2] + 12]
    assert [v for v, b in zip(sp.domains[2], month_bits) if b] == [3]
    assert isinstance([v for v, b in zip(sp.domains[2], month_bits) if b][0], int)


@pytest.mark.parametrize("text,msg", [
    ("carrier = AA ∧ origin = JFK", "no clause for attribute 'month'"),
    ("carrier = AA ∧ origin = JFK ∧ month = 13", "not in its public domain"),
    ("carrier = AA ∧ carrier = UA ∧ origin = JFK ∧ month = 1", "twice"),
    ("airline = AA ∧ origin = JFK ∧ month = 1", "unknown attribute"),
    ("carrier ∈ {AA, AA} ∧ origin = JFK ∧ month = 1", "listed twice"),
    ("carrier AA ∧ origin = JFK ∧ month = 1", "cannot parse"),
    ("carrier ∈ AA ∧ origin = JFK ∧ month = 1", "cannot parse"),
])
def test_parse_errors(flights_space, text, msg):
    with pytest.raises(ValueError, match=msg):
        flights_space.parse(text)


INT_SPACE = ContextSpace.from_domains(["month", "day", "hour"],
                                      [list(range(1, 13)), list(range(1, 8)), [0, 6, 12, 18]])
STR_SPACE = ContextSpace.from_domains(["carrier", "origin", "kind", "one"],
                                      [CARRIERS, ["EWR", "JFK", "LGA"], ["any", "a b", "x-y", "∀"], ["only"]])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_round_trip_random_contexts(data):
    for sp in (INT_SPACE, STR_SPACE):
        bits = data.draw(st.lists(st.booleans(), min_size=sp.t, max_size=sp.t))
        c = np.array(bits, dtype=bool)
        text = sp.render(c)
        assert (sp.parse(text) == c).all(), text
        assert (sp.from_bitstring(sp.bitstring(c)) == c).all()
        assert (sp.unpack(sp.pack(c))[0] == c).all()


def test_value_named_any_is_not_confused():
    sp = STR_SPACE
    # releases made before quoting wrote the value 'any' bare after '=': still read as the value
    c = sp.parse("carrier: any ∧ origin = JFK ∧ kind = any ∧ one = only")
    kind = c[sp.offsets[2]: sp.offsets[2] + 4]
    assert kind.tolist() == [True, False, False, False]
    # now it is quoted, so a reader cannot take it for 'every value'
    assert sp.render(c) == 'carrier: any ∧ origin = JFK ∧ kind = "any" ∧ one = only'
    assert (sp.parse(sp.render(c)) == c).all()
    assert (sp.parse("carrier: any ∧ origin = JFK ∧ kind ∈ {any, a b} ∧ one = only")
            == sp.parse('carrier: any ∧ origin = JFK ∧ kind ∈ {"any", "a b"} ∧ one = only')).all()


# ---------------------------------------------------------------- any category text (issue 20, item 3)

AWKWARD = ["Unemployed, Laid Off", "Washington, D.C.", " lead space", "trail space ", "a=b", "{brace}", 'quote"d',
           "pipe|bar", "Zürich ∧ ∈", "any", "∅", "", "back\\slash", "line\nbreak", '"starts quoted', "tab\there",
           "no\u00a0break", "∀ x: y", "😀"]


@pytest.fixture(scope="module")
def awkward_space() -> ContextSpace:
    return ContextSpace.from_domains(["status", "city", "n"], [["Employed", *AWKWARD[:4]], AWKWARD[4:], [1, 2, 3]])


def test_awkward_values_render_quoted_only_where_needed(awkward_space):
    sp = awkward_space
    assert sp.render(_ctx(sp, {"status": ["Unemployed, Laid Off"], "city": ["a=b"], "n": [1]})) == \
        'status = "Unemployed, Laid Off" ∧ city = a=b ∧ n = 1'
    assert sp.render(_ctx(sp, {"status": ["Employed", "Washington, D.C.", " lead space"],
                               "city": ["{brace}", 'quote"d', "pipe|bar", "Zürich ∧ ∈"]})) == \
        ('status ∈ {Employed, "Washington, D.C.", " lead space"} ∧ '
         'city ∈ {"{brace}", quote"d, pipe|bar, "Zürich ∧ ∈"} ∧ n: any')
    # reserved words, a leading quote, the empty text and invisible characters are quoted (and made visible)
    assert sp.render(_ctx(sp, {"status": ["trail space "], "city": ["any", "∅", "", '"starts quoted'], "n": []})) == \
        'status = "trail space " ∧ city ∈ {"any", "∅", "", "\\"starts quoted"} ∧ n ∈ ∅'
    assert sp.render(_ctx(sp, {"status": ["Employed"], "city": ["line\nbreak", "tab\there", "no\u00a0break"],
                               "n": [2]})) == \
        'status = Employed ∧ city ∈ {"line\\nbreak", "tab\\there", "no\\u00a0break"} ∧ n = 2'
    assert sp.render(_ctx(sp, {"status": ["Employed"], "city": ["back\\slash", "∀ x: y", "😀"], "n": [3]})) == \
        "status = Employed ∧ city ∈ {back\\slash, ∀ x: y, 😀} ∧ n = 3"


def test_awkward_values_round_trip_and_parse_leniently(awkward_space):
    sp = awkward_space
    rng = np.random.default_rng(11)
    for c in rng.random((300, sp.t)) < 0.5:
        assert (sp.parse(sp.render(c)) == c).all(), sp.render(c)
    one = _ctx(sp, {"status": ["Unemployed, Laid Off"], "city": ["Zürich ∧ ∈", "a=b"], "n": [1]})
    # spaces around operators and delimiters are optional; quoted values may use any JSON escape
    for text in ('n=1∧city∈{"Z\\u00fcrich \\u2227 \\u2208",a=b}∧status="Unemployed, Laid Off"',
                 '  status  =  "Unemployed, Laid Off"  ∧  city ∈ { a=b ,"Zürich ∧ ∈" }  ∧  n = 1  '):
        assert (sp.parse(text) == one).all(), text
    # a bare value after '=' runs to the next '∧', so the unquoted form of a comma value is read too
    assert (sp.parse("status = Unemployed, Laid Off ∧ city ∈ {a=b, \"Zürich ∧ ∈\"} ∧ n = 1") == one).all()


def test_quoted_attribute_names():
    sp = ContextSpace.from_domains(["a=b", "x: y", " pad", "ok"], [["u", "v"], ["w"], [1, 2], ["z", "q"]])
    c = np.array([1, 0, 1, 1, 1, 1, 0], dtype=bool)
    assert sp.render(c) == '"a=b" = u ∧ "x: y" = w ∧ " pad": any ∧ ok = z'
    assert (sp.parse(sp.render(c)) == c).all()


@pytest.mark.parametrize("text,msg", [
    ('status = "Unemployed, Laid Off ∧ city = a=b ∧ n = 1', "malformed quoted value"),
    ('status = "Employed" x ∧ city = a=b ∧ n = 1', "unexpected"),
    ('status = ∧ city = a=b ∧ n = 1', "cannot parse the clause"),
    ('status ∈ {Employed,} ∧ city = a=b ∧ n = 1', "empty item"),
    ('status ∈ {Employed ∧ city = a=b ∧ n = 1', "expected ',' or '}'"),
    ('status = Unemployed ∧ city = a=b ∧ n = 1', "not in its public domain"),
    ('status = "lead space" ∧ city = a=b ∧ n = 1', "not in its public domain"),  # the value is ' lead space'
    ('status ∈ {Unemployed, Laid Off} ∧ city = a=b ∧ n = 1', "not in its public domain"),  # two bare items
    ('status = Employed ∧ city = a=b ∧ n = 1 ∧', "cannot parse the clause"),
    ('status: anything ∧ city = a=b ∧ n = 1', "unexpected"),
])
def test_parse_errors_on_awkward_text(awkward_space, text, msg):
    with pytest.raises(ValueError, match=msg):
        awkward_space.parse(text)


_VALUE = st.one_of(st.text(max_size=12), st.integers(-5, 1000))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_round_trip_arbitrary_unicode_domains(data):
    """parse(render(c)) == c for any names and value texts (hypothesis: all of unicode, empty, spaces, ...)."""
    m = data.draw(st.integers(1, 3))
    names = data.draw(st.lists(st.text(max_size=8), min_size=m, max_size=m, unique=True))
    domains = [data.draw(st.lists(_VALUE, min_size=1, max_size=6, unique_by=str)) for _ in range(m)]
    sp = ContextSpace.from_domains(names, domains)
    bits = np.array(data.draw(st.lists(st.booleans(), min_size=sp.t, max_size=sp.t)), dtype=bool)
    text = sp.render(bits)
    assert (sp.parse(text) == bits).all(), text
    # each value maps back to the domain's own value (an int stays an int)
    back = sp.parse(text)
    for i, dom in enumerate(sp.domains):
        chosen = [v for v, b in zip(dom, back[sp.offsets[i]: sp.offsets[i] + len(dom)]) if b]
        assert chosen == [v for v, b in zip(dom, bits[sp.offsets[i]: sp.offsets[i] + len(dom)]) if b]


# ---------------------------------------------------------------- records


def test_encode_codes_and_cell(flights_space):
    sp = flights_space
    df = pd.DataFrame({"carrier": ["UA", "9E", "YV"], "origin": ["LGA", "EWR", "JFK"], "month": [12, 1, 5],
                       "other": [0, 0, 0]})
    codes = sp.encode(df)
    assert codes.dtype == np.int32
    assert codes.tolist() == [[11, 2, 11], [0, 0, 0], [15, 1, 4]]
    cell = sp.cell_context(codes[0])
    assert sp.render(cell) == "carrier = UA ∧ origin = LGA ∧ month = 12"
    assert cell.sum() == 3


def test_encode_accepts_float_and_text_forms(flights_space):
    # nullable integer columns arrive as floats, CSV columns as text
    df = pd.DataFrame({"carrier": ["AA", "AA"], "origin": ["JFK", "JFK"], "month": [3.0, 4.0]})
    assert flights_space.encode(df)[:, 2].tolist() == [2, 3]
    df2 = pd.DataFrame({"carrier": ["AA"], "origin": ["JFK"], "month": ["11"]})
    assert flights_space.encode(df2)[:, 2].tolist() == [10]


def test_encode_errors_name_the_column_never_rows_or_values(flights_space):
    df = pd.DataFrame({"carrier": ["AA", "AA", "ZZ"], "origin": ["JFK"] * 3, "month": [1, 2, 3]},
                      index=[10, 11, 12])
    with pytest.raises(ValueError, match=r"column 'carrier': some rows .*outside the public domain") as e:
        flights_space.encode(df)
    # no raw values, row numbers or index labels in messages (DESIGN rule 6, issue 15 hole 9)
    assert "ZZ" not in str(e.value) and not re.search(r"\b(2|12)\b", str(e.value))
    df = pd.DataFrame({"carrier": ["AA", "AA"], "origin": ["JFK", None], "month": [1, 2]})
    with pytest.raises(ValueError, match=r"column 'origin': some rows are null") as e:
        flights_space.encode(df)
    assert not re.search(r"\b1\b", str(e.value))
    with pytest.raises(ValueError, match=r"column 'origin': some rows .*null"):
        flights_space.encode(df)
    with pytest.raises(ValueError, match="no column 'month'"):
        flights_space.encode(df.drop(columns="month"))


def test_contains_and_flip_all(flights_space):
    sp = flights_space
    rng = np.random.default_rng(5)
    ctx = rng.random((200, sp.t)) < 0.5
    row = np.array([3, 1, 7])
    expect = ctx[:, 3] & ctx[:, 16 + 1] & ctx[:, 19 + 7]
    assert (sp.contains(ctx, row) == expect).all()
    c = ctx[0]
    nb = sp.flip_all(c)
    assert nb.shape == (31, 31)
    assert ((nb != c[None, :]).sum(axis=1) == 1).all()
    assert ((nb != c[None, :]) == np.eye(31, dtype=bool)).all()
    with pytest.raises(ValueError, match="out of range"):
        sp.cell_context([16, 0, 0])
