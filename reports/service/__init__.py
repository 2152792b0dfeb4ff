"""``gpu-kpi serve``: the scheduled weekly job and what it delivers.

- :mod:`.config`: the service's settings (the tracker's file plus ``[report]``, ``[service]``,
  ``[smtp]``, ``[[recipients]]``), every error with its key;
- :mod:`.job`: one run of the weekly job: build, archive, deliver what is owed;
- :mod:`.deliveries`: who is owed which week, from the delivery log (exactly once);
- :mod:`.scheduler`: the cron trigger (the only APScheduler importer);
- :mod:`.mailer`: SMTP (the only ``smtplib`` importer), retries, the password from a file or the
  environment;
- :mod:`.serve`: the process: signals, start-up catch-up, the metrics server;
- :mod:`.prom`: Prometheus ``/metrics`` (the only ``prometheus_client`` importer);
- :mod:`.archive_http`: the archive served read-only over HTTP, with optional basic auth;
- :mod:`.budget_alerts`: budget alerts at 80% and 100%, once per (team, period, level, amount);
- :mod:`.chat`: a chat channel as a recipient: its card through the delivery log;
- :mod:`.commands`: the flags and output of `send` and `serve`;
- :mod:`.httpd`: what the two HTTP servers share: bounded connections, a time for the request,
  security headers on every answer;
- :mod:`.job_notes`: `gpu-kpi job JOBID`: the note printed, a job not imported asked of sacct
  first, and with `--mail` sent once per job through the delivery log (the epilog's call);
- :mod:`.outcomes`: what one run of the service did (`Outcome`, `RunResult`);
- :mod:`.send`: `gpu-kpi send`: one week's report mailed now, outside the delivery log.
"""
