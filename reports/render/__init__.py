"""Rendering one week's KPIs (:class:`reports.kpi.WeekKpis`) to bytes or text: no store, no
files (the archive is :mod:`reports.archive`'s, the BI tables :mod:`reports.data`'s), no KPI
maths here.

- :mod:`.fmt`: number formatting and safe links, shared by every format;
- :mod:`.html`: the standalone HTML report (Jinja2, autoescaped) and the template environment;
- :mod:`.index`: the multi-week index page (the management dashboard), from rows the archive
  read;
- :mod:`.email`: the weekly email (HTML + plain text, charts by ``cid:``) and an engineer's runs;
- :mod:`.charts`: the PNG charts (matplotlib, the only importer);
- :mod:`.exports`: JSON and CSV with stable field names.
"""
