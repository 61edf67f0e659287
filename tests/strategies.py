"""Hypothesis strategies shared by the tests."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from hypothesis import strategies as st

#: Unicode text without lone surrogates (they are not valid Unicode, and refused).
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=20)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=False),
    text,
    st.binary(max_size=20),
    st.datetimes(timezones=st.just(dt.UTC)),
    st.datetimes(),
    st.dates(),
    st.uuids().map(lambda u: uuid.UUID(str(u))),
)

#: Plain values that decode(encode(x)) returns equal (lists, str-keyed dicts).
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(text, children, max_size=5),
    ),
    max_leaves=25,
)
