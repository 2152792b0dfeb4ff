"""Rendering one week's KPIs (:class:`reports.kpi.WeekKpis`) to bytes or text: no store, no
files (the archive is :mod:`reports.archive`'s, the BI tables :mod:`reports.data`'s), no KPI
maths here.

- :mod:`.fmt`: number formatting and safe links, shared by every format;
- :mod:`.html`: the standalone HTML report (Jinja2, autoescaped) and the template environment;
- :mod:`.index`: the multi-week index page (the management dashboard), from rows the archive
  read;
- :mod:`.email`: the weekly email (HTML + plain text, charts by ``cid:``) and an engineer's runs;
- :mod:`.charts`: the PNG charts (matplotlib, the only importer);
- :mod:`.exports`: JSON and CSV with stable field names;
- :mod:`.alerts`: a budget alert as an email and as a chat card;
- :mod:`.chat`: the weekly report as a chat card's text;
- :mod:`.csv_arrow`: the CSV's run lines made in Arrow where pyarrow is installed (a block's
  lines one join, its text written at once); `exports.py` makes them itself where not;
- :mod:`.csvsafe`: CSV cells no spreadsheet runs as a formula;
- :mod:`.parquet`: every run of a week as Parquet, a row group at a time.
"""
