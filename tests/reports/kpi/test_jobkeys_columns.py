""":func:`reports.kpi.jobkeys.job_keys` (string kernels on ASCII text, the rule itself on the
rest) against :func:`reports.kpi.jobkeys.job_key`, the rule run by run, on names built to hit
every part of the suffix rule, odd text and odd links."""

from __future__ import annotations

import json
from collections import UserDict
from typing import Any

import pandas as pd
import pytest
from fakes import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.kpi.jobkeys import job_key, job_keys
from reports.rows import links_text

PIECES = st.sampled_from(
    [
        "resnet",
        "nightly",
        "-",
        "_",
        ".",
        ":",
        "/",
        " ",
        "  ",
        "\t",
        "\x1c",
        "\x0b",
        "\n",
        "2026-11-23",
        "20261123",
        "2026_11_23T10:15:00Z",
        "20261123-101500",
        "2026-11-23t1015z",
        "1123",
        "123",
        "29123456",
        "3f9e2c1a",
        "deadbeef",
        "abc123",
        "a1b2c",
        "ABC123",
        "7f3a9c",
        "=",
        "é",
        "\u0661\u0662\u0663\u0664",  # Arabic-Indic digits: \\d in Python's re
        "\u00a0",  # a no-break space: whitespace to str.split
        "\u2028",
    ]
)
NAMES = st.one_of(
    st.none(),
    st.lists(PIECES, max_size=12).map("".join),
    st.text(alphabet="-_ .:/0123456789abcdefTtZxy\t", max_size=40),
    st.text(max_size=30),
)


class Text(str):
    """A subclass of str: text to the rule (isinstance), not to a type check."""


def _link(kind: str, text: Any) -> object:
    if kind == "given":
        return {"job_key": text}
    if kind == "workload":
        return {"kubernetes_workload": text, "other": "x"}
    if kind == "both":
        return {"job_key": text, "kubernetes_workload": f"ns/Job/{text}"}
    if kind == "mapping":
        return UserDict({"job_key": text})
    if kind == "subclass":
        return {"job_key": Text(text or "")}
    if kind == "number":
        return {"job_key": 7, "kubernetes_workload": text}
    if kind == "empty":
        return {}
    if kind == "text":
        return "not a mapping"
    if kind.startswith("json-"):  # a runs frame's text of the same links (links_text)
        links = _link(kind.removeprefix("json-"), text)
        return links_text(links) if isinstance(links, dict) else links
    if kind == "escaped":  # a name spelled with an escape: the same link once parsed
        return '{"job\\u005fkey": ' + json.dumps(text) + "}"
    if kind == "wandb":
        return links_text({"wandb": f"https://wandb.ai/a/b/runs/{text}"})
    return None


def _as_rule_reads(links: object) -> object:
    """The links the per-run rule is given: a runs frame's text as the dict it stands for,
    so that the columns' reading of the text is held to the rule on the dict."""
    return json.loads(links) if isinstance(links, str) and links.startswith("{") else links


@settings(max_examples=examples(400), deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            NAMES,
            st.sampled_from(
                [
                    *("", "given", "workload", "both", "mapping", "subclass", "number"),
                    *("empty", "text", "json-given", "json-workload", "json-both"),
                    *("json-number", "json-empty", "escaped", "wandb"),
                ]
            ),
            NAMES,
        ),
        min_size=1,
        max_size=25,
    ),
    text_dtype=st.booleans(),
)
def test_the_columns_give_each_run_the_key_the_rule_gives_it(
    rows: list[tuple[str | None, str, str | None]], text_dtype: bool
) -> None:
    names = [name for name, _, _ in rows]
    links = [_link(kind, text) for _, kind, text in rows]
    column = pd.Series(names, dtype="str" if text_dtype else object)
    want = [job_key(n, _as_rule_reads(lk)) for n, lk in zip(names, links, strict=True)]
    got = job_keys(column, pd.Series(links, dtype=object, index=column.index))
    assert list(got) == want
    if all(isinstance(lk, str) or lk is None for lk in links):
        # a column of text, some missing, as a store's read gives it (Arrow's text: no
        # Python object per link)
        got = job_keys(column, pd.Series(links, dtype="str", index=column.index))
        assert list(got) == want


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("job-0042", "job"),  # the bench's names: a million runs, one job
        ("a-abcdef", "a-abcdef"),  # six hex letters, no digit: a word
        ("a-abcde1", "a"),
        ("a-12345a", "a"),
        ("a-1a", "a-1a"),  # a hash has six hex digits or more
        ("x--2026-11-23__3f9e2c1a", "x"),
        ("x-\u0661\u0662\u0663\u0664", "x"),  # Python's \d: any decimal digit
        ("a\u00a0b-1123", "a b"),  # str.split's whitespace, not only ASCII's
        ("  two \x1c words-1123 ", "two words"),
        ("-1123", "-1123"),  # nothing before the suffix: the name itself
    ],
)
def test_odd_names_are_keyed_as_the_rule_keys_them(name: str, want: str) -> None:
    assert job_key(name, None) == want
    for dtype in ("str", object):
        got = job_keys(pd.Series([name, name], dtype=dtype), pd.Series([None, {}]))
        assert list(got) == [want, want]


@pytest.mark.parametrize("workload", ["/", " / ", "\t/\n", "a/", "/a-1234", "//", "  "])
def test_a_workload_of_a_slash_alone_is_its_key_even_empty(workload: str) -> None:
    """``/`` is a workload (not blank): its key is its empty name, not the run's name."""
    links = {"kubernetes_workload": workload}
    want = job_key("name-1234", links)
    assert want == {"a/": "a/", "/a-1234": "a", "//": "//", "  ": "name"}.get(
        workload.strip() or "  ", ""
    )
    got = job_keys(pd.Series(["name-1234"], dtype="str"), pd.Series([links]))
    assert list(got) == [want]


def test_a_link_wins_over_the_name_and_keeps_its_index() -> None:
    names = pd.Series(["resnet-1123", "bert-2026-11-23", None], index=[7, 3, 5], dtype="str")
    links = pd.Series(
        [
            {"job_key": "  nightly \t resnet "},
            {"kubernetes_workload": " ml/Job/eval-29123456 "},
            {},
        ],
        index=[7, 3, 5],
    )
    got = job_keys(names, links)
    assert list(got.index) == [7, 3, 5]
    assert list(got) == ["nightly resnet", "ml/Job/eval", ""]
