"""Recurring jobs: which runs are the same work, by a job key.

A run's key (:func:`job_key`) is the one it recorded (``track(job_key=…)``, ``[tracker]
job_key``, ``GPU_KPI_JOB_KEY`` or Slurm's job name: its ``job_key`` link), else its
Kubernetes workload's (a DCGM import's ``kubernetes_workload`` link, the name's run number
dropped: a CronJob's Jobs are one job), else its name with the run's own suffixes dropped
(:func:`normalized_name`: ``resnet-nightly-1123`` → ``resnet-nightly``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pandas as pd

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
    """:func:`job_key` of many runs at once, by the same index (a million in a few seconds).

    Args:
        names: The runs' names.
        links: The runs' links (mappings; anything else is none).
    """
    search = _SUFFIX.search
    out = []
    for name, lk in zip(names.tolist(), links.tolist(), strict=True):
        if lk and (type(lk) is dict or isinstance(lk, Mapping)):
            given, workload = lk.get(JOB_KEY_LINK), lk.get(WORKLOAD_LINK)
            if (isinstance(given, str) and given.strip()) or (
                isinstance(workload, str) and workload.strip()
            ):
                out.append(job_key(name, lk))
                continue
        if type(name) is not str:
            out.append(job_key(name, None))
            continue
        flat = " ".join(name.split())[:JOB_KEY_MAX].rstrip()
        m = search(flat)
        out.append(flat[: m.start()] if m else flat)
    return pd.Series(out, index=names.index, dtype=object)


def job_key(name: object, links: object) -> str:
    """The run's job key (see the module docstring); "" for a run with no name.

    Args:
        name: The run's name.
        links: The run's links (a mapping; anything else is none).
    """
    links = links if isinstance(links, Mapping) else {}
    given = links.get(JOB_KEY_LINK)
    if isinstance(given, str) and given.strip():
        return " ".join(given.split())[:JOB_KEY_MAX].rstrip()
    workload = links.get(WORKLOAD_LINK)
    if isinstance(workload, str) and workload.strip():
        head, _, last = workload.strip().rpartition("/")
        return f"{head}/{normalized_name(last)}" if head else normalized_name(last)
    return normalized_name(name) if isinstance(name, str) else ""
