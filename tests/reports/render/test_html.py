"""The HTML report and the index: hand-computed figures, escaping, embedded charts, a real
browser."""

from __future__ import annotations

import base64
import io
import os
import random
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import readers
from fakes import run_record as run

from reports import kpi as kpis
from reports.render import html as report_html
from reports.render import index as report_index
from reports.render.charts import CHART_NAMES, charts, utilization_buckets
from tracker.record import MinuteSample, RunRecord

W48 = datetime(2026, 11, 23, tzinfo=UTC)  # Monday of ISO week 2026-W48
W47 = W48 - timedelta(days=7)
NOW = W48 + timedelta(days=10)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
EVIL_RUN = "<script>alert(1)</script>"
EVIL_TEAM = '"><img src=x onerror=alert(1)>'
CHROMIUM = "/usr/bin/chromium"


def week(
    runs: list[RunRecord],
    samples: list[MinuteSample] | None = None,
    at: datetime = W48,
    **kw: object,
) -> kpis.WeekKpis:
    return kpis.week_kpis(
        kpis.runs_frame(runs), kpis.samples_frame(samples or []), at, tz=UTC, now=NOW, **kw
    )  # type: ignore[arg-type]


def small_week() -> kpis.WeekKpis:
    """14 GPU-h at $3.85: a 10 h run at 90% and a 4-GPU hour at 10% with hostile names."""
    return week(
        [
            run(
                "a",
                W48,
                10,
                util=90.0,
                name="llama-sft",
                team="nlp",
                project="llm",
                user="ana",
                verdict="healthy",
                links={"wandb": "https://wandb.ai/acme/llm/runs/a1"},
            ),
            run(
                "b",
                W48 + timedelta(days=1),
                1,
                gpus=4,
                util=10.0,
                name=EVIL_RUN,
                team=EVIL_TEAM,
                project="vision",
                user="ben",
                verdict="input-bound",
                advice="<b>more</b> DataLoader workers",
                mem_peak_gib=12.0,
                mem_total_gib=80.0,
                links={
                    "wandb": "https://wandb.ai/acme/vision/runs/b2",
                    "tensorboard": "javascript:alert(1)",
                    "<i>notes</i>": " JaVaScRiPt:alert(2)",
                    "logs": "/shared/tb/vision/b2",
                },
            ),
        ]
    )


def fleet_week(weeks: int = 8, per_week: int = 8) -> kpis.WeekKpis:
    """A demo-like fleet: several teams and GPU models over some weeks, W48 last."""
    rng = random.Random(48)
    teams = {
        "nlp": "llm-finetune",
        "vision": "vision-cls",
        "research": "scratch",
        "search": "ranking",
        EVIL_TEAM: "asr",
    }
    models = [("H100", 8, 3.85), ("A100-80GB", 4, 2.00), ("L4", 1, 0.80), ("H200", 2, 4.50)]
    runs = []
    for w in range(weeks):
        start = W48 - timedelta(days=7 * (weeks - 1 - w))
        for i in range(per_week):
            team = rng.choice(sorted(teams))
            model, gpus, price = rng.choice(models)
            util = None if i == 0 else rng.uniform(3, 97)
            hours = rng.uniform(0.5, 6)
            runs.append(
                run(
                    f"r{w}-{i}",
                    start + timedelta(hours=rng.uniform(0, 150)),
                    hours,
                    gpus=gpus,
                    util=util,
                    model=model,
                    price=price,
                    team=team,
                    project=teams[team],
                    user=rng.choice(["ana", "ben", "chen"]),
                    name=EVIL_RUN if (w, i) == (weeks - 1, 1) else f"{teams[team]}-{w}-{i}",
                    mem_peak_gib=rng.uniform(4, 70),
                    mem_total_gib=80.0,
                    idle_usd=gpus * hours * price * 0.2 if util is not None and util < 30 else None,
                    verdict="input-bound" if util is not None and util < 50 else "healthy",
                    advice="Raise DataLoader num_workers."
                    if util is not None and util < 50
                    else None,
                    links={
                        "wandb": f"https://wandb.ai/acme/runs/r{w}{i}",
                        "tensorboard": f"/shared/tb/r{w}{i}",
                    },
                )
            )
    return week(runs)


@pytest.fixture(scope="module")
def small() -> tuple[kpis.WeekKpis, dict[str, bytes], str]:
    k = small_week()
    c = charts(k)
    return k, c, report_html.render_html(k, c, generated_at=datetime(2026, 11, 30, 8, tzinfo=UTC))


# -- the report --------------------------------------------------------------------------------
def test_the_page_parses_and_has_every_section(small: tuple) -> None:
    _, _, doc = small
    page = readers.parse_html(doc)
    assert doc.startswith("<!DOCTYPE html>")
    assert {
        "headline",
        "trends",
        "underutilized-share",
        "breakdowns",
        "by-team",
        "by-project",
        "by-user",
        "by-gpu_model",
        "runs",
        "rightsizing",
        "definitions",
    } <= page.ids()
    text = page.plain()
    assert "GPU efficiency report — 2026-W48" in text and "23–29 Nov 2026" in text
    assert "Generated 2026-11-30 08:00 UTC" in text


def test_headline_cards_show_the_hand_computed_figures(small: tuple) -> None:
    _, _, doc = small
    text = readers.parse_html(doc).plain()
    assert "14.0 GPU-h" in text
    assert "$53.90" in text  # 14 GPU-h x $3.85
    assert "67.1%" in text  # (0.9 x 10 + 0.1 x 4) / 14, weighted by GPU-hours
    assert "$13.59" in text  # 4 GPU-h x 3.85 x (1 - 10/85); run a is over the target
    assert "NVML utilization" in text
    # no previous week: every card says n/a for the change
    assert text.count("n/a") >= 6 and "▲" not in text and "▼" not in text
    # 4 of 14 GPU-hours are in the one underutilized run
    assert "28.6%" in text and "1 underutilized runs" in text


def test_breakdowns_and_engineer_tables(small: tuple) -> None:
    _, _, doc = small
    text = readers.parse_html(doc).plain()
    # by team: nlp 10 GPU-h $38.50 at 90%; the other 4 GPU-h $15.40 at 10%
    assert "nlp 10.0 GPU-h 90.0% $38.50 $0.00 $0.00 — 1" in text  # no energy: no CO2e
    assert "4.0 GPU-h 10.0% $15.40 $13.59 $0.00 — 1" in text
    # the underutilized run: 4 x H100, with verdict and advice
    assert "4 × H100 4.0 GPU-h 10.0% $15.40 $13.59 input-bound" in text
    assert "<b>more</b> DataLoader workers" in text  # shown as text
    # right-sizing: 12 GiB x 1.2 and 10% of 989.4 TFLOP/s fit an L4 (85% of 121) at $0.80,
    # and a 1g.20gb slice of the H100 (85% of 1/7 of 989.4 = 120; 19 GiB usable) at 1/7 of
    # $3.85 = $0.55: 4 GPU-h x (3.85 - 0.55) = $13.20
    assert (
        "H100 12.0 GiB of 80.0 GiB 10.0% H100 MIG 1g.20gb 12.0 GiB × 1.2 fits 19 GiB; 10.0% of "
        "989.4 = 99 TFLOP/s (16-bit) fits 85% of its 1/7 of 989.4 = 120: the same hours $13.20"
    ) in text


def test_week_over_week_change_has_arrows_and_percent() -> None:
    k = week([run("prev", W47, 28, util=20.0), run("now", W48, 14, util=40.0)])
    text = readers.parse_html(report_html.render_html(k, {})).plain()
    # GPU-hours and spend halved; utilization 20% → 40%: up 20 points (not a relative 100%)
    assert "▼ 50.0%" in text and "▲ 20.0 pp" in text and "▲ 100.0%" not in text
    assert "last week: 28.0 GPU-h" in text and "last week: $107.80" in text


def test_user_strings_are_escaped_never_markup(small: tuple) -> None:
    _, _, doc = small
    assert EVIL_RUN not in doc and "<script" not in doc.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in doc
    assert EVIL_TEAM not in doc and "<img src=x" not in doc
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in doc
    assert "<b>more</b>" not in doc and "<i>notes</i>" not in doc
    page = readers.parse_html(doc)
    assert EVIL_RUN in page.plain() and EVIL_TEAM in page.plain()  # as text, exactly
    assert page.all("script") == [] and all(a["src"].startswith("data:") for a in page.all("img"))
    assert not any(k.startswith("on") for _, attrs in page.tags for k in attrs)


def test_only_http_links_become_hrefs(small: tuple) -> None:
    _, _, doc = small
    page = readers.parse_html(doc)
    # run a (90%) is not underutilized, so only run b's links are listed
    hrefs = [a["href"] for a in page.all("a")]
    # the archive's own neighbours (relative), then the one http(s) link of a run
    assert hrefs == ["2026-W47.html", "index.html", "https://wandb.ai/acme/vision/runs/b2"]
    text = page.plain()
    assert "W&B run" in text
    assert "TensorBoard: javascript:alert(1)" in text  # shown, not linked
    assert "<i>notes</i>: JaVaScRiPt:alert(2)" in text
    assert "logs: /shared/tb/vision/b2" in text


def test_charts_are_embedded_pngs_and_nothing_is_external(small: tuple) -> None:
    _, c, doc = small
    page = readers.parse_html(doc)
    imgs = page.all("img")
    assert len(imgs) == len(CHART_NAMES) == 5
    for img in imgs:
        prefix = "data:image/png;base64,"
        assert img["src"].startswith(prefix) and img["alt"]
        assert base64.b64decode(img["src"][len(prefix) :]).startswith(PNG_SIGNATURE)
    assert page.all("link") == [] and page.all("script") == [] and page.all("iframe") == []
    assert "@import" not in doc and "url(" not in doc
    external = [
        a.get("src") or a.get("href")
        for _, a in page.tags
        if (a.get("src") or a.get("href") or "").startswith(("http:", "https:", "//"))
    ]
    assert external == ["https://wandb.ai/acme/vision/runs/b2"]
    assert len(doc.encode()) < 100_000
    assert sum(len(b) for b in c.values()) < 60_000


def test_report_url_links_only_when_http() -> None:
    k = small_week()
    good = readers.parse_html(
        report_html.render_html(k, {}, report_url="https://r.example.com/2026-W48.html")
    )
    assert "https://r.example.com/2026-W48.html" in [a["href"] for a in good.all("a")]
    bad = readers.parse_html(report_html.render_html(k, {}, report_url="javascript:alert(3)"))
    assert not any("javascript" in a["href"] for a in bad.all("a"))


def test_sm_activity_basis_is_named() -> None:
    k = week([run("a", W48, 2, util=90.0, sm_active_pct=45.0)], basis="sm_active")
    text = readers.parse_html(report_html.render_html(k, {})).plain()
    assert "SM activity" in text and "45.0%" in text and "target 60%" in text


def test_an_empty_week_still_renders() -> None:
    k = week([run("old", W47, 3)])
    doc = report_html.render_html(k, charts(k))
    text = readers.parse_html(doc).plain()
    assert "No GPU time was recorded this week." in text
    assert "No runs to fix this week" in text


# -- charts -----------------------------------------------------------------------------------
def test_chart_pngs_are_small_deterministic_and_640_by_260(small: tuple) -> None:
    from PIL import Image

    k, c, _ = small
    assert set(c) == set(CHART_NAMES)
    assert charts(k) == c  # same KPIs, same bytes
    for png in c.values():
        assert png.startswith(PNG_SIGNATURE)
        with Image.open(io.BytesIO(png)) as im:
            assert im.size == (640, 260) and im.mode == "P" and not im.info.get("Software")


def test_utilization_buckets_are_weighted_by_gpu_hours() -> None:
    k = week(
        [
            run("a", W48, 2, util=5.0),
            run("b", W48, 3, util=15.0),
            run("c", W48, 1, util=100.0),
            run("d", W48, 4, util=None),
            run("e", W48, 0.5, gpus=2, util=19.9),
        ]
    )
    b = utilization_buckets(k.runs)
    assert b["0–10"] == pytest.approx(2.0) and b["10–20"] == pytest.approx(4.0)
    assert b["90–100"] == pytest.approx(1.0) and b["unknown"] == pytest.approx(4.0)
    assert sum(b.values()) == pytest.approx(k.headline.gpu_hours)


def test_dollar_signs_in_team_names_do_not_become_mathtext() -> None:
    k = week([run("a", W48, 2, util=10.0, team="$\\frac{1}{0}$ team $x^2$")])
    assert charts(k)["waste_by_team"].startswith(PNG_SIGNATURE)


# -- the index --------------------------------------------------------------------------------
def weeks_rows() -> list[dict[str, object]]:
    return [
        {
            "label": "2026-W48",
            "gpu_hours": 14.0,
            "spend_usd": 53.9,
            "utilization_pct": 67.14,
            "waste_usd": 13.59,
            "idle_usd": 0.0,
            "runs": 2,
        },
        {
            "label": "2026-W46",
            "gpu_hours": 10.0,
            "spend_usd": 38.5,
            "utilization_pct": None,
            "waste_usd": 0.0,
            "idle_usd": 1.5,
            "runs": 1,
        },
        {
            "label": "2026-W47",
            "gpu_hours": 1234.5,
            "spend_usd": 4752.83,
            "utilization_pct": 40.0,
            "waste_usd": 2516.0,
            "idle_usd": 120.0,
            "runs": 31,
        },
    ]


def test_index_lists_weeks_newest_first_with_links_and_sparklines() -> None:
    page = readers.parse_html(report_index.render_index(weeks_rows()))
    links = [(a["href"]) for a in page.all("a")]
    assert links == ["2026-W48.html", "2026-W47.html", "2026-W46.html"]
    text = page.plain()
    assert "3 weekly reports, 2026-W46 to 2026-W48" in text
    assert (
        text.index("2026-W48 23–29 Nov 2026")
        < text.index("2026-W47 16–22 Nov 2026")
        < text.index("2026-W46 9–15 Nov 2026")
    )
    assert "2026-W47 16–22 Nov 2026 1,234.5 GPU-h $4,752.83 40.0% $2,516.00 $120.00 31" in text
    assert "2026-W46 9–15 Nov 2026 10.0 GPU-h $38.50 n/a" in text
    svgs = page.all("svg")
    assert len(svgs) == 3
    # utilization's line breaks where W46 is unknown: W47-W48 is one segment of 2 points
    lines = [a["points"] for a in page.all("polyline")]
    assert [len(p.split()) for p in lines] == [2, 3, 3]
    assert "67.1%" in text and "$53.90" in text  # the latest week's values by the sparklines
    assert page.all("script") == [] and page.all("img") == []


def test_index_refuses_a_label_or_href_that_is_not_a_week_page() -> None:
    rows = weeks_rows()
    with pytest.raises(ValueError, match="bad week label"):
        report_index.render_index([{**rows[0], "label": "javascript:alert(1)//"}])
    with pytest.raises(ValueError, match="neither relative nor http"):
        report_index.render_index([{**rows[0], "href": "javascript:alert(1)"}])
    with pytest.raises(ValueError, match="lacks"):
        report_index.render_index([{"label": "2026-W48"}])


def test_index_row_from_kpis(small: tuple) -> None:
    k, _, _ = small
    row = report_index.index_row(k)
    assert row["label"] == "2026-W48" and row["spend_usd"] == pytest.approx(53.9)
    assert "2026-W48.html" in report_index.render_index([row])


# -- formatting -------------------------------------------------------------------------------
def test_numbers_are_formatted_for_humans() -> None:
    f = report_html
    assert f.fmt_usd(1234.564) == "$1,234.56" and f.fmt_usd(-3) == "-$3.00"
    assert f.fmt_usd(float("nan")) == "n/a" and f.fmt_usd(None) == "n/a"
    assert f.fmt_pct(67.14) == "67.1%" and f.fmt_hours(12.34) == "12.3 GPU-h"
    assert f.fmt_hours(0.25) == "0.25 GPU-h" and f.fmt_hours(1234.5) == "1,234.5 GPU-h"
    assert f.fmt_change(12.34) == "▲ 12.3%" and f.fmt_change(-4) == "▼ 4.0%"
    assert f.fmt_change_pp(-0.5) == "▼ 0.5 pp" and f.fmt_change_pp(0.04) == "0.0 pp"
    assert f.fmt_change_pp(None) == "n/a"
    # unit costs keep three significant digits however small
    assert [f.fmt_unit_usd(v) for v in (0.0041234, 0.041, 1.2549, 1234.567, 0, None)] == [
        "$0.00412",
        "$0.0410",
        "$1.25",
        "$1,234.57",
        "$0.00",
        "n/a",
    ]
    assert f.fmt_change(None) == "n/a" and f.fmt_change(0.01) == "0.0%"


# -- a real browser ---------------------------------------------------------------------------
def _chromium() -> str:
    found = shutil.which("chromium") or (CHROMIUM if os.path.exists(CHROMIUM) else None)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Chromium is missing in CI: apt-get install -y chromium")
        pytest.skip("Chromium not installed (apt-get install -y chromium)")
    return found


@pytest.mark.chromium
def test_the_report_loads_in_headless_chromium(tmp_path: Path) -> None:
    from PIL import Image

    exe = _chromium()
    k = fleet_week()
    page = tmp_path / "2026-W48.html"
    page.write_text(report_html.render_html(k, charts(k)), encoding="utf-8")
    shot = tmp_path / "r.png"
    flags = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--hide-scrollbars",
    ]
    env = {**os.environ, "HOME": str(tmp_path)}
    shown = subprocess.run(
        [
            *flags,
            "--enable-logging=stderr",
            "--v=0",
            f"--screenshot={shot}",
            "--window-size=1280,2400",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    console = [
        line for line in shown.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line
    ]
    assert shown.returncode == 0 and console == [], shown.stderr[-2000:]
    with Image.open(shot) as im:
        assert im.size == (1280, 2400)
        colors = im.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colors is None or len(colors) > 200  # text, cards and charts, not a blank page
    assert shot.stat().st_size > 50_000

    dom = subprocess.run(
        [*flags, "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    ).stdout
    parsed = readers.Page()
    parsed.feed(dom)
    assert {"headline", "trends", "breakdowns", "runs", "rightsizing"} <= parsed.ids()
    assert len(parsed.all("img")) == 5 and parsed.all("script") == []
    assert EVIL_RUN in parsed.plain()  # the browser built a text node, not a script


def test_runs_to_fix_cover_every_verdict_by_waste() -> None:
    """Issue 11: an input-bound run at 60% (8 GPU-h x $2.00 = $16.00; waste 16 x (1 - 60/85) =
    $4.71) and a low-efficiency run at 88% (no waste) are to fix although neither is under 50%;
    a healthy run at 92% is not. Ordered by waste."""
    k = week(
        [
            run(
                "aug",
                W48,
                2,
                gpus=4,
                util=60.0,
                model="A100-80GB",
                price=2.00,
                name="resnet50-heavy-aug",
                verdict="input-bound",
            ),
            run("vit", W48, 1, util=88.0, name="vit-l-fp32", verdict="low-efficiency"),
            run("llama", W48, 3, gpus=8, util=92.0, name="llama-8b-sft", verdict="healthy"),
        ]
    )
    assert len(k.underutilized) == 0
    page = readers.parse_html(report_html.render_html(k, {}))
    rows = [
        ln
        for ln in page.plain()
        .split("For engineers: runs to fix, by recoverable waste")[1]
        .split("Right-sizing")[0]
        .split(" started ")
    ]
    text = " ".join(rows)
    assert text.index("resnet50-heavy-aug") < text.index("vit-l-fp32")
    assert "$4.71" in text and "llama-8b-sft" not in text
