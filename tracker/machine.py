"""Whose the lost GPU-time is: the machine's share of a run in one sentence, said the same way on
the end-of-run summary, ``gpu-kpi job`` and the report's runs to fix.

The machine's share is the GPU-time the clocks were held down for power or thermal reasons
(:attr:`tracker.record.RunRecord.throttled_gpu_hours`) and, where the report found one, the
node a recurring job runs slower on than on its others (:mod:`reports.kpi.slownodes`).
"""

from __future__ import annotations

from tracker.units import S_PER_HOUR

SHOWN_FROM_SHARE = 0.01
"""The share of a run's GPU-time from which its throttled time is named (a few seconds of a
power cap are not worth a line)."""


def throttle_how(source: str | None) -> str:
    """``counter-exact`` or ``sampled every 1 s``: how a throttled time was measured, in words
    (:attr:`tracker.record.RunRecord.throttle_source`)."""
    return source if isinstance(source, str) and source != "counter" else "counter-exact"


def throttled_words(gpu_hours: float, gpu_count: int, source: str | None) -> str:
    """``throttled 10 min, counter-exact`` (GPU-minutes where several GPUs ran; seconds under
    a minute)."""
    seconds = gpu_hours * S_PER_HOUR
    gpu = "GPU-" if gpu_count > 1 else ""
    amount = f"{seconds / 60.0:,.0f} {gpu}min" if seconds >= 59.5 else f"{seconds:.0f} {gpu}s"
    return f"throttled {amount}, {throttle_how(source)}"


def machine_sentence(
    *,
    gpu_hours: float,
    gpu_count: int,
    throttled_gpu_hours: float | None,
    throttle_source: str | None,
    usd_per_gpu_hour: float | None,
    what: str = "run",
) -> str | None:
    """``17% of this run's GPU-time and $0.64 were the machine (throttled 10 min,
    counter-exact), not your code``; None where the machine's share is nothing worth naming
    (throttled under :data:`SHOWN_FROM_SHARE` of the GPU-time, or not measured).

    Args:
        gpu_hours: The run's GPU-hours.
        gpu_count: Its GPUs.
        throttled_gpu_hours: Of them, held below the clocks (None: not measured).
        throttle_source: How that was measured (``counter``, ``sampled every N s``).
        usd_per_gpu_hour: The run's price (None: unpriced; the dollars are left out).
        what: What it is (``run``, ``job``).

    Returns:
        The sentence, or None.
    """
    throttled = throttled_gpu_hours or 0.0
    if gpu_hours <= 0 or throttled < SHOWN_FROM_SHARE * gpu_hours:
        return None
    usd = None if usd_per_gpu_hour is None else throttled * usd_per_gpu_hour
    parts = [throttled_words(throttled, gpu_count, throttle_source)]
    return machine_words(throttled / gpu_hours, usd, parts, what=what)


def machine_words(share: float, usd: float | None, parts: list[str], *, what: str) -> str:
    """``17% of this run's GPU-time and $0.64 were the machine (PARTS), not your code``.

    Args:
        share: The machine's share of the GPU-time (0–1).
        usd: Its dollars (None: unpriced, left out).
        parts: What it was, each in a few words.
        what: ``run``, ``job``.
    """
    paid = "" if usd is None else f" and ${usd:,.2f}"
    return (
        f"{100 * min(share, 1.0):.0f}% of this {what}'s GPU-time{paid} were the machine "
        f"({'; '.join(parts)}), not your code"
    )
