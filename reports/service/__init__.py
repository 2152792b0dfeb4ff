"""``gpu-kpi serve``: the scheduled weekly job and what it delivers.

- :mod:`.config`: the service's settings (the tracker's file plus ``[report]``, ``[service]``,
  ``[smtp]``, ``[[recipients]]``), every error with its key;
- :mod:`.job`: one run of the weekly job: build, archive, deliver what is owed;
- :mod:`.deliveries`: who is owed which week, from the delivery log (exactly once);
- :mod:`.scheduler`: the cron trigger (the only APScheduler importer);
- :mod:`.mailer`: SMTP (the only ``smtplib`` importer), retries, the password from a file or the
  environment;
- :mod:`.serve`: the process: signals, start-up catch-up, the metrics server;
- :mod:`.prom`: Prometheus ``/metrics`` (the only ``prometheus_client`` importer).
"""
