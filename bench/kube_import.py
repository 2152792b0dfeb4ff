"""How fast ``gpu-kpi import kubernetes`` turns kube-state-metrics' answers into allocations
(:func:`reports.imports.kube.read_kubernetes` and :func:`~reports.imports.kube.write_pods`):
a week of ``--pods-per-day`` GPU pods on ``--nodes`` nodes of 8 GPUs, against a baseline in the
same run (fetching and parsing the same JSON answers and nothing else).

A local HTTP server plays Prometheus: for each 12-hour chunk it answers the pods query with one
series per pod running in the chunk (a point a minute), the capacity query with one per node,
the owner queries with each pod's Job, from answers built before the clock starts. So the
figures are this side's: HTTP, JSON, the spans, owners and capacity merged, the store written
(a new SQLite store, one transaction); not the server's query evaluation.

    .venv/bin/python bench/kube_import.py [--pods-per-day 2000] [--nodes 250]
"""

from __future__ import annotations

import argparse
import http.server
import json
import random
import sys
import tempfile
import threading
import time
import tracemalloc
import urllib.parse
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reports.imports.kube import read_kubernetes, write_pods  # noqa: E402
from tracker.store import RunStore  # noqa: E402

WEEK = datetime(2026, 11, 23, tzinfo=UTC)
END = WEEK + timedelta(days=7)


def pods(per_day: int, nodes: int, rng: random.Random) -> list[tuple[str, str, int, float, float]]:
    """(name, node, GPUs, first minute, last minute) of a week's pods."""
    out = []
    for i in range(per_day * 7):
        start = WEEK.timestamp() + rng.randrange(0, 7 * 24 * 60) * 60
        length = rng.randrange(10, 12 * 60) * 60
        out.append(
            (
                f"train-{i}",
                f"node-{rng.randrange(nodes):04d}",
                rng.choice((1, 2, 4, 8)),
                start,
                start + length,
            )
        )
    return out


def answers(
    week: list[tuple[str, str, int, float, float]], nodes: int
) -> dict[tuple[str, str, str], bytes]:
    """(kind, start, end) → the JSON body: the pods and capacity queries per 12-hour chunk, the
    owners at each chunk's last minute."""
    from reports.imports.kube import CHUNK_POINTS
    from reports.imports.prom import chunks

    out: dict[tuple[str, str, str], bytes] = {}
    for first, last in chunks(WEEK.timestamp(), END.timestamp(), points=CHUNK_POINTS):
        series, owners = [], []
        for name, node, gpus, a, b in week:
            lo, hi = max(a, first), min(b, last)
            if lo > hi:
                continue
            labels = {"namespace": "ml", "pod": name, "uid": f"uid-{name}", "node": node}
            values = [[t, str(gpus)] for t in range(int(lo), int(hi) + 1, 60)]
            series.append({"metric": labels, "values": values})
            owners.append(
                {
                    "metric": {
                        "namespace": "ml",
                        "pod": name,
                        "uid": f"uid-{name}",
                        "owner_kind": "Job",
                        "owner_name": name.rsplit("-", 1)[0],
                        "owner_is_controller": "true",
                    },
                    "values": [[last, "1"]],
                }
            )
        capacity = [
            {
                "metric": {"node": f"node-{n:04d}"},
                "values": [[t, "8"] for t in range(int(first), int(last) + 1, 60)],
            }
            for n in range(nodes)
        ]
        key = (f"{first:.0f}", f"{last:.0f}")
        for kind, result in (("pods", series), ("capacity", capacity), ("owners", owners)):
            body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
            out[(kind, *key)] = json.dumps(body).encode()
    return out


def serve(bodies: dict[tuple[str, str, str], bytes]) -> tuple[http.server.ThreadingHTTPServer, str]:
    empty = json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": []}}
    ).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            query, start, end = q["query"][0], q["start"][0], q["end"][0]
            kind = (
                "pods"
                if "kube_pod_container_resource_requests" in query
                else "capacity"
                if "kube_node_status_capacity" in query
                else "owners"
                if "kube_pod_owner" in query
                else ""
            )
            if kind == "owners":  # asked at the chunk's last minute: find its chunk
                key = next((k for k in bodies if k[0] == "owners" and k[2] == end), None)
            else:
                key = (kind, start, end)
            body = bodies.get(key, empty) if key else empty
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods-per-day", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=250)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    week = pods(args.pods_per_day, args.nodes, random.Random(args.seed))
    bodies = answers(week, args.nodes)
    size = sum(len(b) for b in bodies.values())
    server, url = serve(bodies)
    try:
        t0 = time.perf_counter()
        names = {
            "pods": "kube_pod_container_resource_requests",
            "capacity": "kube_node_status_capacity",
            "owners": "kube_pod_owner",
        }
        for kind, start, end in bodies:  # the baseline: the same answers fetched and parsed
            first = end if kind == "owners" else start
            params = {"query": names[kind], "start": first, "end": end, "step": "60s"}
            with urllib.request.urlopen(
                f"{url}/api/v1/query_range?{urllib.parse.urlencode(params)}"
            ) as r:
                json.loads(r.read())
        base = time.perf_counter() - t0
        tracemalloc.start()
        t0 = time.perf_counter()
        done = read_kubernetes(url, since=WEEK, until=END, now=END + timedelta(days=1))
        read = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            with RunStore(f"sqlite:///{Path(tmp) / 'runs.db'}") as store:
                write_pods(store, done)
            write = time.perf_counter() - t0
    finally:
        server.shutdown()
    n = len(done.jobs)
    print(
        f"a week: {len(week):,} pods ({args.pods_per_day:,}/day) on {args.nodes} nodes, "
        f"{size / 2**20:,.0f} MiB of answers"
    )
    print(f"fetch and parse alone (baseline): {base:.2f} s")
    print(
        f"read_kubernetes: {read:.2f} s ({read / base:.2f}x the baseline), {n:,} allocations, "
        f"{len(done.capacity)} node spans, peak {peak / 2**20:,.0f} MiB traced"
    )
    print(f"written to a new SQLite store: {write:.2f} s")
    whole = read + write
    print(f"the whole import: {n / whole:,.0f} pods/s; a year of such weeks ≈ {52 * whole:,.0f} s")


if __name__ == "__main__":
    main()
