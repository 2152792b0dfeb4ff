"""A runs frame's links as the JSON text the store writes (``reports.rows.links_text``): the
read matches that text without parsing it, in Python's ``re`` and in Arrow alike, and reads
back the same links; anything else is parsed, or named as not links."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from fakes import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.data.columns import _LINKS_TEXT, _links_texts
from reports.kpi.frames import shared_objects
from reports.rows import NO_LINKS, links_text, parsed_links

LINKS = st.dictionaries(st.text(max_size=12), st.text(max_size=40), max_size=4)
"""Links of any text: non-ASCII, control characters, quotes, backslashes, surrogates."""


@settings(max_examples=examples(300), deadline=None)
@given(links=st.lists(LINKS, min_size=1, max_size=8))
def test_the_stores_text_is_matched_as_it_is_and_reads_back_the_same_links(
    links: list[dict[str, str]],
) -> None:
    texts = [links_text(d) for d in links]
    # the text the store writes: matched, by Python's re and by Arrow's RE2 alike
    assert all(re.fullmatch(_LINKS_TEXT, t) for t in texts)
    for dtype in ("str", object):
        column, ok = _links_texts(pd.Series(texts, dtype=dtype))
        assert ok.all()
        assert column.tolist() == texts  # kept as they are, not parsed and written again
    assert [parsed_links(t) for t in texts] == links


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ('{"b":"2","a":"1"}', '{"a": "1", "b": "2"}'),  # other separators: written again
        ('{"a": "\u00e9"}', '{"a": "\\u00e9"}'),  # raw non-ASCII: escaped, as json.dumps does
        ('{"a": "\x7f"}', '{"a": "\\u007f"}'),  # a raw DEL too
        ('{"b": "2", "a": "1"}', '{"b": "2", "a": "1"}'),  # keys unsorted: as it is
    ],
)
def test_other_spellings_of_links_are_read_as_the_store_writes_them(text: str, kept: str) -> None:
    assert re.fullmatch(_LINKS_TEXT, text) is None or text == kept
    for dtype in ("str", object):
        column, ok = _links_texts(pd.Series([text], dtype=dtype))
        assert ok.tolist() == [True]
        assert column.tolist() == [kept]
        assert parsed_links(kept) == json.loads(text)


@pytest.mark.parametrize(
    "value",
    [
        '["a"]',  # a list
        '{"a": 1}',  # a value that is no text
        '{"a": {"b": "c"}}',  # nested
        '{"a": "b"} x',  # something after the object
        "[" * 100_000 + "]" * 100_000,  # past the parser's depth
        "",
        None,
        float("nan"),
    ],
)
def test_what_is_no_links_is_named_not_read(value: object) -> None:
    column, ok = _links_texts(pd.Series([value, links_text({"w": "x"})], dtype=object))
    assert ok.tolist() == [False, True]  # the first row goes to records_of, which names it
    assert column.tolist() == [NO_LINKS, '{"w": "x"}']
    # read alone (a mapping taken as it is, anything else none): the store's read named it
    whole = isinstance(value, str) and value.startswith("{") and value.endswith("}")
    assert parsed_links(value) == (json.loads(str(value)) if whole else {})


def test_a_column_without_text_is_looked_at_row_by_row() -> None:
    """A links column of only NaN (pandas makes it float) has no string methods."""
    column, ok = _links_texts(pd.Series([np.nan, np.nan]))
    assert ok.tolist() == [False, False]
    assert column.tolist() == [NO_LINKS, NO_LINKS]


def test_links_of_a_record_not_from_the_store_are_written_as_text() -> None:
    assert parsed_links(links_text({1: "a", "b": "c"})) == {"1": "a", "b": "c"}  # type: ignore[dict-item]
    assert parsed_links(links_text({"a": b"x"})) == {"a": "b'x'"}  # type: ignore[dict-item]


def test_values_that_cannot_be_hashed_are_objects_as_they_are() -> None:
    values = shared_objects(pd.Series([["a"], ["a"], None], dtype=object))
    assert values.tolist() == [["a"], ["a"], None]
