"""``gpu-kpi import``: runs that were not tracked by our callback, from the logs teams already
keep, written to the run store like the tracker's (a run record and per-minute samples, with
``source`` saying where they came from)."""
