"""Step maths, no I/O and no clock: step counters over a span, rates, data wait, the FLOP rate
MFU is made of (its peak and the judgement are :mod:`tracker.peaks`'), and the rule for what
counts as a step's count.

The session feeds :class:`RunSteps` with what its hooks measured (a step's duration, the time it
waited for input, its samples, tokens and FLOPs); everything here is arithmetic on those
numbers, so a test states the expected figure directly.
"""

from __future__ import annotations

import math
import operator
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any


def count(value: object) -> int | float:
    """``value`` as one step's count (samples, tokens, FLOPs): a finite number >= 0, an int kept
    an int (numpy integers and one-element integer tensors become ints too).

    Raises ValueError, with the reason, for anything else: nan, ±inf, a negative number, a bool,
    a string (even ``"5"``), an object that is not a number, and a tensor on a GPU, which is
    not read at all (that would synchronize the GPU on every step)."""
    if type(value) is int:  # the common cases first: step() calls this on the hot path
        n: int | float = value
    elif type(value) is float:
        n = value
    elif isinstance(value, bool | str | bytes):
        raise ValueError("not a number")
    elif getattr(getattr(value, "device", None), "type", "cpu") != "cpu":
        # reading a GPU tensor's value waits for the GPU: never on the step path
        raise ValueError("a tensor on the GPU (reading it would synchronize): pass a Python number")
    else:
        try:
            n = operator.index(value)  # type: ignore[arg-type]
        except Exception:
            try:
                n = float(value)  # type: ignore[arg-type]
            except Exception:
                raise ValueError("not a number") from None
    if not 0 <= n < math.inf:  # nan compares false too
        raise ValueError("not a finite number >= 0")
    return n


_FAST_MAX = 1e300
"""Two counts below it sum to a finite float: ``0 <= n < _FAST_MAX > total`` lets ``n`` be
added to ``total`` unchecked."""
HELD_STEPS = 512
"""Steps :meth:`RunSteps.tick` holds before it adds them up."""
HOLD_MAX = 1e290
"""A held count is under it: :data:`HELD_STEPS` of them added to totals under a tenth of
:data:`_FAST_MAX` stay finite."""


def _check_sum(total: int | float, n: int | float) -> None:
    """ValueError when ``total + n`` would no longer be a finite float."""
    try:
        if math.isfinite(total + n):
            return
    except OverflowError:  # an int beyond the float range
        pass
    raise ValueError("the run's total would overflow")


class StepCounter:
    """Step counters over a span (the run, or the current log window), kept by
    :class:`RunSteps`. Warm-up excluded. Times in seconds; FLOPs are model FLOPs."""

    __slots__ = ("flops", "samples", "steps", "time_s", "tokens", "wait_s", "waited")

    def __init__(self) -> None:
        self.steps = 0
        self.time_s = 0.0
        self.wait_s = 0.0
        self.waited = 0
        self.samples: int | float = 0
        self.tokens: int | float = 0
        self.flops = 0.0

    def rate(self, total: float) -> float | None:
        """``total`` per second of step time, or None before any measured time."""
        return total / self.time_s if total and self.time_s > 0 else None

    @property
    def data_wait_pct(self) -> float | None:
        """Share of step time spent waiting for input, 0–100."""
        if not self.waited or self.time_s <= 0:
            return None
        return min(100.0, 100.0 * self.wait_s / self.time_s)

    @property
    def step_time_ms(self) -> float | None:
        return 1000.0 * self.time_s / self.steps if self.steps else None

    def since(self, earlier: StepCounter) -> StepCounter:
        """The steps added after ``earlier`` (a :meth:`copy` of this counter) was taken."""
        out = StepCounter()
        for name in StepCounter.__slots__:
            setattr(out, name, getattr(self, name) - getattr(earlier, name))
        return out

    def copy(self) -> StepCounter:
        return self.since(_ZERO)


class RunSteps:
    """A run's steps as the session's hooks see them, in the times of its clock (seconds):
    ``steps``, ``samples`` and ``tokens`` of every step, and the measured (post-warm-up) steps
    in ``total`` (the whole run) and ``window`` (since the last log). A step adds to ``total``
    only: the window is the total less what it was at the last log.

    The common step (:meth:`tick`: counts that are None or plain numbers) is only held, and
    added up by :meth:`flush`: at every log (:meth:`take_window`), at the end, every
    :data:`HELD_STEPS` steps, and before anything else changes the counters. So a step costs
    one append; ``steps``, ``samples``, ``tokens`` and ``total`` are as of the last flush (the
    session flushes on the training thread only; the sampler thread's heartbeat reads them as
    they are).

    Counts come from user code, so each is checked (:func:`count`): a bad one (nan, inf,
    negative, not a number, or one that would overflow the run's total) is dropped as if it had
    not been given, and :meth:`step` and :meth:`add_flops` return ``name=value
    (reason)`` for each one dropped. The totals therefore stay finite sums of the good counts."""

    __slots__ = (
        "_held",
        "_last_end",
        "_room",
        "_unflopped",
        "_window_start",
        "ready_at",
        "samples",
        "steps",
        "tokens",
        "total",
        "warmup_steps",
    )

    def __init__(self, warmup_steps: int = 0) -> None:
        self.steps = 0
        self.samples: int | float = 0
        self.tokens: int | float = 0
        self.total = StepCounter()
        self._window_start = StepCounter()  # ``total`` as it was at the last log
        self._unflopped = 0  # measured steps since the last add_flops
        self._last_end: float | None = None
        self._held: list[tuple[Any, ...]] = []
        self._room = True  # every total far enough from overflowing to hold HELD_STEPS more
        self.ready_at: float | None = None
        """When the next batch was in hand (:meth:`ready`), if known."""
        self.warmup_steps = warmup_steps
        """The first steps, not measured (the session's setting, for :meth:`tick`)."""

    def ready(self, t: float) -> None:
        """The next batch was in hand at ``t``: the time since the last step waited for input."""
        self.ready_at = t

    def interrupt(self) -> None:
        """The time until the next step is not training: that step is not measured."""
        self.flush()
        self._last_end = None

    def pause(self, t0: float, t1: float) -> None:
        """``t0`` to ``t1`` went to the tracker itself (logging): not to the next step."""
        self.flush()
        if self._last_end is not None and self._last_end <= t0:
            self._last_end += t1 - t0

    def tick(self, t: float, samples: object, tokens: object, flops: object) -> bool:
        """The common step, held (one append; :meth:`flush` adds it up): a step that ended at
        ``t`` whose counts are None or plain numbers under :data:`HOLD_MAX`. False, with
        nothing done, for any other: :meth:`step` checks those."""
        n: Any = samples
        k: Any = tokens
        f: Any = flops
        if (
            (n is None or (type(n) is int and 0 <= n < HOLD_MAX))
            and (k is None or (type(k) is int and 0 <= k < HOLD_MAX))
            and (f is None or (type(f) in (float, int) and 0 <= f < HOLD_MAX))
            and self._room
        ):
            held = self._held
            held.append((t, self.ready_at, n, k, f))
            self.ready_at = None
            if len(held) >= HELD_STEPS:
                self.flush()
            return True
        return False

    def flush(self) -> None:
        """Add up the held steps, in order. Never raises."""
        held, self._held = self._held, []
        try:
            for step in held:
                self._add(step, self.warmup_steps)
        except Exception:  # a bug of ours: those steps are not counted, training goes on
            pass
        self._room = max(self.samples, self.tokens, self.total.flops) < _FAST_MAX / 10

    def step(
        self,
        t: float,
        *,
        warmup_steps: int,
        samples: object = None,
        tokens: object = None,
        flops: object = None,
        flops_per_step: object = None,
    ) -> list[str]:
        """A step ended at ``t``; measured unless it is among the first ``warmup_steps`` or
        follows an :meth:`interrupt`; ``flops`` its model FLOPs, default ``flops_per_step``.
        Never raises: the session calls it on the training thread."""
        self.flush()
        ready, self.ready_at = self.ready_at, None
        bad: list[str] = []
        try:
            n: Any = samples
            k: Any = tokens
            f: Any = flops if flops is not None else flops_per_step
            # counts that are None or plain numbers far below overflowing their total are
            # taken as they are (a few compares); anything else gets the full rule
            if not (
                (n is None or (type(n) is int and 0 <= n < _FAST_MAX > self.samples))
                and (k is None or (type(k) is int and 0 <= k < _FAST_MAX > self.tokens))
                and (
                    f is None or (type(f) in (float, int) and 0 <= f < _FAST_MAX > self.total.flops)
                )
            ):
                n = self._checked("samples", samples, self.samples, bad)
                k = self._checked("tokens", tokens, self.tokens, bad)
                f = self._checked("flops", flops, self.total.flops, bad)
                if f is None:
                    f = self._checked("flops_per_step", flops_per_step, self.total.flops, bad)
            self._add((t, ready, n, k, f), warmup_steps)
        except Exception as e:  # a bug of ours, or settings built by hand: not the caller's
            self._last_end = t
            bad.append(f"a step ({type(e).__name__}: {e})")
        return bad

    def _add(self, step: tuple[Any, ...], warmup_steps: int) -> None:
        """A step (its end, when its batch was in hand, and its checked samples, tokens and
        FLOPs) added to the counters."""
        t, ready, n, k, f = step
        last, self._last_end = self._last_end, t
        if last is not None and self.steps >= warmup_steps:
            c = self.total
            c.steps += 1
            c.time_s += t - last
            if ready is not None:
                c.wait_s += ready - last if ready > last else 0.0
                c.waited += 1
            if n:
                c.samples += n
            if k:
                c.tokens += k
            if f:
                c.flops += f
            self._unflopped += 1
        self.steps += 1
        if n:
            self.samples += n
        if k:
            self.tokens += k

    def add_flops(self, flops: object, steps: object) -> list[str]:
        """Model FLOPs of the last ``steps`` steps, known only afterwards (the HF Trainer's
        ``total_flos``): credited pro rata to the measured steps among them, so that FLOP/s
        divides FLOPs and time of the same steps."""
        self.flush()
        measured, self._unflopped = self._unflopped, 0
        bad: list[str] = []
        f = self._checked("flops", flops, self.total.flops, bad)
        n = self._checked("steps", steps, 0, bad)
        if f and n:
            credited = f / n * min(measured, n)
            self.total.flops += credited
        return bad

    @property
    def window(self) -> StepCounter:
        """The measured steps since the last :meth:`take_window`."""
        self.flush()
        return self.total.since(self._window_start)

    def take_window(self) -> StepCounter:
        """The log window's counters; a new window starts."""
        window = self.window
        self._window_start = self.total.copy()
        return window

    @staticmethod
    def _checked(
        name: str, value: object, total: int | float, bad: list[str]
    ) -> int | float | None:
        if value is None:
            return None
        try:
            n = count(value)
            _check_sum(total, n)
            return n
        except ValueError as e:
            bad.append(f"{name}={_short_repr(value)} ({e})")
            return None


_ZERO = StepCounter()


def _short_repr(value: object) -> str:
    try:
        return reprlib.repr(value)
    except Exception:
        return f"<{type(value).__name__}>"


def infer_batch_size(batch: Any) -> int | None:
    """The leading dimension of the first tensor found in ``batch`` (a tensor, a sequence,
    a mapping such as a HF ``BatchEncoding``), or None. Reads only the shape: no GPU sync."""
    found = batch_leaf(batch)
    return found[0] if found is not None else None


def batch_leaf(batch: Any) -> tuple[int, tuple[Any, ...]] | None:
    """:func:`infer_batch_size`'s answer and the keys (indices) that lead from ``batch`` to the
    tensor it read: ``batch[k0][k1]...`` for ``(k0, k1, ...)``, ``()`` for a tensor."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return (int(shape[0]), ()) if len(shape) else None
    if isinstance(batch, Mapping):
        items: Any = batch.items()
    elif isinstance(batch, Sequence) and not isinstance(batch, str | bytes):
        items = enumerate(batch)
    else:
        return None
    for key, value in items:
        if (found := batch_leaf(value)) is not None:
            return found[0], (key, *found[1])
    return None
