"""gpu-kpi reports: the run store's weekly KPIs, the report, the service and the CLI."""
