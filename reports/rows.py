"""The row types that the data layer (:mod:`reports.data`: SQL) reads and writes and the KPI
maths (:mod:`reports.kpi`) computes with: below both, so that neither imports the other. Plain
frozen dataclasses and constants: no pandas, no SQL, no I/O. And the one interface every format
shows a report section through (:class:`Part`, built by :mod:`reports.sections`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any, ClassVar, Protocol

TIME_DTYPE = "datetime64[us, UTC]"
"""The dtype of a runs frame's times, whatever they hold (pandas makes a column of only None
seconds)."""

NO_LINKS = "{}"
"""A run's ``links`` in a frame when it has none."""


def links_text(links: Mapping[str, str]) -> str:
    """A run's links as a runs frame holds them: the JSON text the store writes (keys
    sorted, ``json.dumps``' separators and escapes), not a dict per run (a million runs, each
    with its W&B link: 1.8 s of CPU and 0.36 GiB of dicts). :func:`parsed_links` reads it
    back.

    Args:
        links: Link name → target. Keys of mixed types, or a value JSON has no form for (a
            record not from the store), are written as their text.

    Returns:
        The JSON text.
    """
    try:
        return json.dumps(dict(links), sort_keys=True)
    except (TypeError, ValueError):
        return json.dumps({str(k): v for k, v in links.items()}, sort_keys=True, default=str)


def parsed_links(value: Any) -> dict[str, Any]:
    """The links of a runs frame's cell as a dict.

    Args:
        value: :func:`links_text`'s text, or a mapping.

    Returns:
        Link name → target, the values as the text or mapping holds them; ``{}`` for anything
        else (text that is no JSON object, a missing value).
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):  # not JSON (or nested past the parser): none
            return {}
    return dict(value) if isinstance(value, Mapping) else {}


FAILED_STATES = ("failed", "crashed", "cancelled", "node_fail", "out_of_memory", "boot_fail")
"""How a run's status (:data:`tracker.record.STATUSES`: ``failed``, ``crashed``) or a job's
state (Slurm's, lower case: ``cancelled by 1000`` too) begins when its GPU-time is the
ledger's failed work (:func:`reports.kpi.ledger.failed_work`). Not ``timeout`` or
``preempted``: a job stopped at its limit or for another's may have checkpointed its work."""


def failed_state(state: str | None) -> bool:
    """Whether one run's status or job's state is a failure (:data:`FAILED_STATES`; a column
    of them: :func:`reports.kpi.ledger.is_failed`).

    Args:
        state: The status or state, any case (None: not failed).

    Returns:
        Whether it begins with one of :data:`FAILED_STATES`.
    """
    return (state or "").lower().startswith(FAILED_STATES)


@dataclass(frozen=True, kw_only=True)
class Capacity:
    """A node's GPUs over a span (a row of ``gpu_kpi_capacity``): what the scheduler could
    hand out, from ``sinfo`` or ``kube_node_status_capacity``."""

    source: str
    cluster: str
    node: str
    start_at: datetime
    end_at: datetime
    gpus: int
    gpu_model: str | None


@dataclass(frozen=True, kw_only=True)
class Allocation:
    """One scheduler allocation of GPUs (a row of ``gpu_kpi_allocations``)."""

    source: str
    cluster: str
    job_id: str
    """The allocation's own id: ``SLURM_JOB_ID`` inside it, ``JobIDRaw`` in sacct."""
    shown_id: str
    name: str
    user: str
    account: str
    team: str
    partition: str
    state: str
    start_at: datetime
    end_at: datetime | None
    """None: it was running when last imported (it counts up to ``seen_at``)."""
    seen_at: datetime
    gpus: float
    """GPUs held: whole for a Slurm job or a device plugin's pod; a share where a pod held MIG
    instances (their slices of the GPU: 3/7 for a ``3g.40gb``)."""
    gpu_model: str | None
    hosts: tuple[str, ...]

    @property
    def until(self) -> datetime:
        """Its end, or for a job running when imported the time of that import: what is known
        of it (import it again to know more)."""
        return self.end_at if self.end_at is not None else max(self.seen_at, self.start_at)


@dataclass(frozen=True, kw_only=True)
class Headline:
    gpu_hours: float
    known_gpu_hours: float
    """GPU-hours with a utilization value on the basis; the rest is "unknown", never idle."""
    utilization_pct: float | None
    """Σ util × hours ÷ Σ hours over known GPU-time: weighted by GPU-hours."""
    spend_usd: float
    waste_usd: float
    idle_usd: float
    runs: int
    underutilized_runs: int
    underutilized_gpu_hours_pct: float | None
    usd_per_1k_samples: float | None
    usd_per_1m_tokens: float | None
    unpriced_gpu_hours: float
    """GPU-hours of models without a price: not in spend or waste."""
    energy_kwh: float | None = None
    """GPU energy of the runs that measured it (NVML's counter), kWh; None when none did."""
    co2e_kg: float | None = None
    """energy × PUE × the grid's g CO2e/kWh (``[carbon]``), kg."""
    energy_gpu_hours: float = 0.0
    """GPU-hours of the runs with an energy figure: what ``energy_kwh`` covers."""
    unmeasured_gpu_hours: float = 0.0
    """Of ``gpu_hours``, those no sample measured (:mod:`reports.kpi.ledger`): scheduler jobs'
    unsampled time and runs' GPU-weeks without a utilization value."""
    unmeasured_usd: float = 0.0
    """Their dollars (priced ones; in ``spend_usd``, beside the waste, not in it)."""
    failed_gpu_hours: float = 0.0
    """Of ``gpu_hours``, those of runs and jobs that failed, crashed or were cancelled
    (:func:`reports.kpi.ledger.failed_work`): measured, but in no later bucket (not idle, not
    below target)."""
    failed_usd: float = 0.0
    """Their dollars (priced ones; in ``spend_usd``, beside the waste, not in it)."""
    redone_gpu_hours: float = 0.0
    """Of ``gpu_hours``, those on steps a later run of the job ran again after resuming from
    an earlier checkpoint (:func:`reports.kpi.ledger.redone_work`)."""
    redone_usd: float = 0.0
    """Their dollars (priced ones; in ``spend_usd``, beside the waste, not in it)."""
    throttled_gpu_hours: float = 0.0
    """Of ``gpu_hours``, those the clocks were held down for power or thermal reasons
    (:func:`reports.kpi.ledger.throttled_work`): the machine's, not the code's; 0 where not
    measured."""
    throttled_usd: float = 0.0
    """Their dollars (priced ones; in ``spend_usd``, beside the waste, not in it)."""
    slow_node_gpu_hours: float = 0.0
    """Of ``gpu_hours``, those lost to slow nodes (:mod:`reports.kpi.slownodes`): the
    machine's, not the code's."""
    slow_node_usd: float = 0.0
    """Their dollars (priced ones; in ``spend_usd``, beside the waste, not in it)."""
    unallocated_gpu_hours: float | None = None
    """Capacity nobody held (:func:`reports.kpi.ledger.unallocated`); None: no capacity known."""
    unallocated_usd: float | None = None
    """Its dollars, not in ``spend_usd`` (no one held it); None: unknown or no price."""
    unallocated_unpriced_gpu_hours: float = 0.0
    """Of ``unallocated_gpu_hours``, those of nodes without a price (not owned)."""
    jobs: int = 0
    """Scheduler jobs with GPU-time no run holds (their rows are in ``gpu_hours``)."""

    @property
    def none_priced(self) -> bool:
        """Whether the week had GPU-time and none of it a price: its spend is unknown, not $0."""
        return none_priced(self.gpu_hours, self.unpriced_gpu_hours)


def none_priced(gpu_hours: float, unpriced_gpu_hours: float) -> bool:
    """Whether GPU-time was had and none of it priced (within rounding): spend unknown, not $0."""
    return unpriced_gpu_hours > 0 and unpriced_gpu_hours >= gpu_hours - 1e-9


class Part(Protocol):
    """A section's part of one week (:mod:`reports.sections`), as every format shows it.

    The formats (:mod:`reports.render`) know this interface and no section: the page includes
    ``_<name>.html.j2`` with :meth:`view` at its :attr:`place`, the email (a ``top`` section)
    ``_<name>.email.html.j2`` and ``_<name>.email.txt.j2`` with ``view(brief=True)``; the page's
    and the email's summary show its :meth:`summary` lines; the JSON document has its
    :meth:`document`'s keys, the CSV its :meth:`csv_rows`, the chat card its
    :meth:`card_lines`; a team's report holds :meth:`of_team`.
    """

    name: ClassVar[str]
    """Its key in :attr:`reports.kpi.WeekKpis.parts` and its templates' stem."""
    place: ClassVar[str]
    """Where the page shows it: ``lead`` (right under the headline; the email has its own
    lead), ``top`` (after the manager's sections, and in the email) or ``detail`` (after where
    the waste went)."""

    def of_team(self, team: str) -> Part:
        """The part of ``team``'s report: its own rows only."""
        ...

    def view(self, *, brief: bool = False) -> Mapping[str, Any] | None:
        """What its templates show, as display strings (:mod:`reports.render.fmt`); None: it
        is left out. ``brief``: for an email or a chat card (user strings on one line, cut)."""
        ...

    def summary(self) -> list[tuple[str, str, str]]:
        """Its lines in the summary at the top, ``(id, label, text)`` (none: it has none)."""
        ...

    def document(self, tz: tzinfo) -> Mapping[str, Any]:
        """Its keys in the week's JSON document, and their values (plain, JSON-safe)."""
        ...

    def csv_rows(self, doc: Mapping[str, Any]) -> Iterable[tuple[str, str, Mapping[str, Any]]]:
        """The CSV's ``(section, key, {metric: value})`` rows of its keys in ``doc`` (the
        week's document)."""
        ...

    def card_lines(self) -> list[str]:
        """Its lines on the chat card (none: it is not on the card)."""
        ...
