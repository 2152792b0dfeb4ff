"""Recurring jobs: which runs are the same work, by a job key.

A run's key (:func:`job_key`) is the one it recorded (``track(job_key=…)``, ``[tracker]
job_key``, ``GPU_KPI_JOB_KEY`` or Slurm's job name: its ``job_key`` link), else its
Kubernetes workload's (a DCGM import's ``kubernetes_workload`` link, the name's run number
dropped: a CronJob's Jobs are one job), else its name with the run's own suffixes dropped
(:func:`normalized_name`: ``resnet-nightly-1123`` → ``resnet-nightly``).

:func:`job_keys` gives the same keys for a column of runs with string kernels (Arrow's, where
pandas has them): ASCII text through :data:`_ASCII_SUFFIX`, the rare other text through
:func:`normalized_name` itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import repeat

import numpy as np
import pandas as pd

from reports.rows import parsed_links
from tracker.record import JOB_KEY_LINK
from tracker.scheduler import JOB_KEY_MAX, WORKLOAD_LINK

_SEP = r"[-_.:/ ]"
_SUFFIX = re.compile(
    rf"(?<=[^-_.:/ ]){_SEP}+(?:"
    # a date, with a time or not: 2026-11-23, 20261123, 2026_11_23T10:15:00, 20261123-101500
    r"(?i:\d{4}[-_]?\d{2}[-_]?\d{2}(?:[-_T ]?\d{2}:?\d{2}(?::?\d{2})?Z?)?)"
    r"|\d{4,}"  # a run number: -1123, -29123456
    r"|(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}"  # a hash
    rf")(?:{_SEP}+(?:"
    r"(?i:\d{4}[-_]?\d{2}[-_]?\d{2}(?:[-_T ]?\d{2}:?\d{2}(?::?\d{2})?Z?)?)"
    r"|\d{4,}"
    r"|(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}"
    r"))*$"
)
"""What makes a name one run of many, at its end after a separator, as often as they end it: a
date or time, a number of four digits or more (``resnet-50`` and ``bert-sweep-17`` name what
they run), a hash."""

_HEX = "[0-9a-f]"
_MIXED = "(?:[0-9][a-f]|[a-f][0-9])"
_ASCII_PART = (
    r"(?:(?i:[0-9]{4}[-_]?[0-9]{2}[-_]?[0-9]{2}(?:[-_T ]?[0-9]{2}:?[0-9]{2}(?::?[0-9]{2})?Z?)?)"
    r"|[0-9]{4,}"
    # a hash: six hex digits or more with a digit and a letter, so a digit next to a letter
    # somewhere, with four more around it
    rf"|{_HEX}{{4,}}{_MIXED}{_HEX}*|{_HEX}{{3}}{_MIXED}{_HEX}+|{_HEX}{{2}}{_MIXED}{_HEX}{{2,}}"
    rf"|{_HEX}{_MIXED}{_HEX}{{3,}}|{_MIXED}{_HEX}{{4,}})"
)
_ASCII_SUFFIX = rf"^(.*?[^-_.:/ ]){_SEP}+{_ASCII_PART}(?:{_SEP}+{_ASCII_PART})*$"
""":data:`_SUFFIX` without lookaround, for RE2 (Arrow's regular expressions): the same on ASCII
text with no line break (``\\d`` is ``[0-9]`` there), the name before it the first group. The
shortest such group is the earliest place the suffix can start, as :meth:`re.Pattern.search`
finds it."""
_ASCII_SPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "
"""The ASCII characters :meth:`str.split` splits at."""


def normalized_name(name: str) -> str:
    """A run's name without what makes it one run of many (:data:`_SUFFIX`); the name itself
    where nothing else would be left. At most 200 characters are looked at.

    Args:
        name: The run's name.
    """
    out = " ".join(str(name).split())[:JOB_KEY_MAX].rstrip()
    m = _SUFFIX.search(out)
    return out[: m.start()] if m else out


def job_keys(names: pd.Series, links: pd.Series) -> pd.Series:
    """:func:`job_key` of many runs at once, by the same index, a column at a time: ASCII text
    through string kernels (:data:`_ASCII_SUFFIX`), a link looked at only where a run has one;
    a run with other text (or a mapping that is not a dict) by :func:`job_key` itself.

    Args:
        names: The runs' names.
        links: The runs' links (mappings, or a runs frame's text:
            :func:`reports.rows.links_text`; anything else is none).
    """
    n = len(names)
    out = np.full(n, "", dtype=object)
    by_rule = np.zeros(n, dtype=bool)  # the rule itself, run by run (text not ASCII…)
    todo = np.ones(n, dtype=bool)  # no key from a link yet
    values = _keyed_links(links)
    kinds = _kinds(values)
    dicts = np.flatnonzero(_is(kinds, dict))
    others = np.flatnonzero(~_is(kinds, dict) & ~_is(kinds, type(None)))
    by_rule[others[_are(kinds[others], Mapping)]] = True
    held = dicts[np.fromiter(map(len, values[dicts]), dtype=np.int64, count=len(dicts)) > 0]
    if len(held):
        given = np.fromiter(map(dict.get, values[held], repeat(JOB_KEY_LINK)), object, len(held))
        given_text, given_odd = _ascii_texts(given)
        keys = _flat(pd.Series(given[given_text], dtype="str"))
        found = np.zeros(len(held), dtype=bool)
        found[given_text] = (keys != "").to_numpy(dtype=bool)
        at = np.flatnonzero(found)
        out[held[at]] = _clipped(keys[keys != ""]).to_numpy(dtype=object)
        by_rule[held[given_odd]] = True
        rest = np.flatnonzero(~found & ~given_odd)
        workload = np.fromiter(
            map(dict.get, values[held[rest]], repeat(WORKLOAD_LINK)), object, len(rest)
        )
        work_text, work_odd = _ascii_texts(workload)
        keys = _workload_keys(pd.Series(workload[work_text], dtype="str"))
        got = ~_is(_kinds(keys), type(None))
        out[held[rest[work_text][got]]] = keys[got]
        found[rest[work_text][got]] = True
        by_rule[held[rest[work_odd]]] = True
        todo[held[found]] = False
    todo &= ~by_rule
    rows = np.flatnonzero(todo)
    if isinstance(names.dtype, pd.StringDtype):
        column = names.iloc[rows]
        texts = column.str.isascii().fillna(False).to_numpy(dtype=bool)
        by_rule[rows[~texts & column.notna().to_numpy(dtype=bool)]] = True
        out[rows[texts]] = _normalized(column[texts])
    else:
        column_values = names.to_numpy(dtype=object)[rows]
        texts, odd = _ascii_texts(column_values)
        by_rule[rows[odd]] = True
        out[rows[texts]] = _normalized(pd.Series(column_values[texts], dtype="str"))
    for i in np.flatnonzero(by_rule):
        out[i] = job_key(names.iat[i], values[i])
    return pd.Series(out, index=names.index, dtype=object)


_KEYED = rf'"{JOB_KEY_LINK}"|"{WORKLOAD_LINK}"|\\u'
"""What a links text holds where it may hold a link that gives a key: the links' names as
``json.dumps`` writes them, or an escape (a name could be spelled with one)."""


def _keyed_links(links: pd.Series) -> np.ndarray:
    """The links as objects, a text parsed (:func:`parsed_links`) only where it may hold a
    link that gives a key (:data:`_KEYED`; a million runs' W&B links are not parsed), None
    for the other texts; mappings and anything else as they are."""
    if isinstance(links.dtype, pd.StringDtype):  # a runs frame's text: no object per run
        keyed = links.str.contains(_KEYED, regex=True).fillna(False).to_numpy(dtype=bool)
        values = np.full(len(links), None, dtype=object)
        values[keyed] = [parsed_links(v) for v in links[keyed].tolist()]
        return values
    values = np.fromiter(links.tolist(), dtype=object, count=len(links))
    texts = np.flatnonzero(_are(_kinds(values), str))  # a subclass of str too, as job_key
    if len(texts):
        column = links if len(texts) == len(links) else links.iloc[texts]
        keyed = column.astype("str").str.contains(_KEYED, regex=True).to_numpy(dtype=bool)
        values[texts] = None
        at = texts[keyed]
        values[at] = [parsed_links(v) for v in column.to_numpy(dtype=object)[keyed]]
    return values


def _kinds(values: np.ndarray) -> np.ndarray:
    """Each value's type."""
    return np.fromiter(map(type, values), dtype=object, count=len(values))


def _is(kinds: np.ndarray, kind: type) -> np.ndarray:
    """Which of ``kinds`` are ``kind`` itself."""
    return np.asarray(kinds == np.array(kind, dtype=object), dtype=bool)


def _are(kinds: np.ndarray, cls: type) -> np.ndarray:
    """Which of ``kinds`` are ``cls`` or a subclass of it, each distinct type asked once."""
    out = np.zeros(len(kinds), dtype=bool)
    for kind in set(kinds.tolist()):
        if issubclass(kind, cls):
            out |= _is(kinds, kind)
    return out


def _ascii_texts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which values are ASCII ``str`` (the string kernels' part), and which are other text (a
    ``str`` not ASCII, or of a subclass of ``str``: the rule's part, run by run)."""
    kinds = _kinds(values)
    exact = _is(kinds, str)
    ascii_ = np.zeros(len(values), dtype=bool)
    ascii_[exact] = np.fromiter(map(str.isascii, values[exact]), dtype=bool, count=exact.sum())
    other = np.flatnonzero(~exact & ~_is(kinds, type(None)))
    odd = ~ascii_ & exact
    odd[other[_are(kinds[other], str)]] = True
    return ascii_, odd


def _flat(texts: pd.Series) -> pd.Series:
    """``" ".join(t.split())`` of each ASCII text."""
    return texts.str.replace(f"[{_ASCII_SPACE}]+", " ", regex=True).str.strip(" ")


def _clipped(flat: pd.Series) -> pd.Series:
    """The first :data:`JOB_KEY_MAX` characters of each flat ASCII text, no space at the end."""
    return flat.str.slice(0, JOB_KEY_MAX).str.rstrip(" ")


def _normalized(texts: pd.Series) -> np.ndarray:
    """:func:`normalized_name` of each ASCII text, as objects."""
    if not len(texts):
        return np.array([], dtype=object)
    flat = _clipped(_flat(texts))
    return flat.str.replace(_ASCII_SUFFIX, r"\1", regex=True).to_numpy(dtype=object)


def _workload_keys(texts: pd.Series) -> np.ndarray:
    """A Kubernetes workload's key of each ASCII text: its namespace and kind as they are, its
    name normalized (``""`` for ``/`` alone: the rule's key too); None where it is blank (the
    run's name decides)."""
    if not len(texts):
        return np.array([], dtype=object)
    stripped = texts.str.strip(_ASCII_SPACE)
    parts = stripped.str.extract(r"(?s)^(.*)/([^/]*)\Z", expand=True)
    head = parts[0].fillna("").to_numpy(dtype=object)
    name = _normalized(parts[1].fillna(stripped).astype("str"))
    keys = np.where(head != "", head + "/" + name, name)
    keys = keys.astype(object)
    keys[stripped.to_numpy(dtype=object) == ""] = None
    return keys


def job_key(name: object, links: object) -> str:
    """The run's job key (see the module docstring); "" for a run with no name.

    Args:
        name: The run's name.
        links: The run's links (a mapping, or a runs frame's text:
            :func:`reports.rows.links_text`; anything else is none).
    """
    links = links if isinstance(links, Mapping) else parsed_links(links)
    given = links.get(JOB_KEY_LINK)
    if isinstance(given, str) and given.strip():
        return " ".join(given.split())[:JOB_KEY_MAX].rstrip()
    workload = links.get(WORKLOAD_LINK)
    if isinstance(workload, str) and workload.strip():
        head, _, last = workload.strip().rpartition("/")
        return f"{head}/{normalized_name(last)}" if head else normalized_name(last)
    return normalized_name(name) if isinstance(name, str) else ""
