"""What the service's budget check costs at fleet scale, next to the ``/metrics`` refresh.

``serve`` checks the budgets every ``budget_check_min`` minutes (default 15): the spend of every
team in the current week and month so far and in the week and month before
(:func:`reports.budgets.current_lines` with ``previous=True``, four reads, priced as the report
prices them). The baseline, in the same run on the same store, is what ``/metrics`` recomputes
every 5 minutes (:func:`reports.build.compute_live`: the last complete week and this one). Run
it on a store of ``bench/report_scale.py`` (1,000 GPUs: 10.08 M minute rows in its week and 11
weeks of run summaries), at its ``now`` (30 Nov 2026 12:00 UTC: November so far, October whole):

    .venv/bin/python bench/budget_check.py --store sqlite:////tmp/gpu-kpi-scale/store-v1-1000g-benign.db
        [--repeat 3]

It prints the fastest of ``--repeat`` for each and the ratio, and the spend the check found
per team next to the weekly report's spend of the last complete week (their November lines
cover more than that week, never less).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def fastest(f: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> int:
    from reports.budgets import current_lines
    from reports.build import compute_live
    from reports.kpi.budgets import Budget
    from reports.request import Request
    from tracker.store import RunStore

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, metavar="URL")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    req = Request(week=None, tz=UTC)
    live_s, (latest, _) = fastest(lambda: compute_live(args.store, req, now=NOW), args.repeat)
    teams = [str(t) for t in latest.by["team"]["team"]]
    budgets = [Budget(team=t, usd_per_week=1e6, usd_per_month=4e6) for t in teams]

    def check() -> list[Any]:
        with RunStore(args.store) as store:
            return current_lines(store, req, budgets, now=NOW, previous=True)

    check_s, lines = fastest(check, args.repeat)
    print(f"store: {args.store}  now: {NOW:%Y-%m-%d %H:%M} UTC  teams: {len(teams)}")
    print(f"/metrics refresh (compute_live): {live_s:.2f} s")
    print(
        f"budget check (4 periods):        {check_s:.2f} s  = {check_s / live_s:.2f}x the refresh"
    )
    week = dict(zip(latest.by["team"]["team"], latest.by["team"]["spend_usd"], strict=True))
    for b in lines:
        if b.label == "2026-11":
            print(
                f"  {b.team:<12} November so far ${b.spend_usd:,.2f}  "
                f"(W48's report: ${week.get(b.team, 0.0):,.2f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
