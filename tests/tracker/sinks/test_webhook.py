"""Chat webhooks against a real HTTP server on 127.0.0.1: what Slack, Teams and a JSON endpoint
receive, retries on 429 (Retry-After) and 5xx, nothing else retried or followed, the secret
path never in an error; and the tracker's live idle alert reaching one."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fakes import Clock, ListSink
from webhook_server import webhook_server

from tracker import track
from tracker.sinks.webhook import WebhookError, kind_of, message, post


def test_each_chat_gets_its_own_shape_with_the_users_text_escaped() -> None:
    name = "run <https://evil.example|click> & [x](http://evil)"
    slack = message(
        "slack",
        "gpu-kpi: GPUs idle",
        f"run {name}",
        facts=[("team", "nlp")],
        link=("Open in W&B", "https://wandb.ai/r"),
    )
    assert slack["text"] == (
        "*gpu-kpi: GPUs idle*\n• team: nlp\nrun run &lt;https://evil.example|click&gt; &amp; "
        "[x](http://evil)\n<https://wandb.ai/r|Open in W&amp;B>"
    )
    assert slack["blocks"][0]["text"] == {"type": "mrkdwn", "text": slack["text"]}
    teams = message("teams", "t", name, facts=[("team", "nlp")], link=("Open", "https://x/r"))
    (attachment,) = teams["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert (card["type"], card["version"]) == ("AdaptiveCard", "1.4")
    # Teams shows a backslash escape as it is: link syntax is broken with a zero-width space
    assert (
        card["body"][2]["text"] == "run <\u200bhttps://evil.example|click> & [x]\u200b(http://evil)"
    )
    assert card["body"][1] == {"type": "FactSet", "facts": [{"title": "team", "value": "nlp"}]}
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open", "url": "https://x/r"}]
    assert message("json", "t", name, facts=[("team", "nlp")]) == {
        "source": "gpu-kpi",
        "title": "t",
        "text": name,
        "facts": {"team": "nlp"},
    }
    assert [
        kind_of(u)
        for u in (
            "https://hooks.slack.com/services/T/B/x",
            "https://acme.webhook.office.com/webhookb2/x",
            "https://prod-1.westeurope.logic.azure.com/workflows/x",
            "https://example.com/hook",
        )
    ] == ["slack", "teams", "teams", "json"]


def test_a_post_is_json_and_429_waits_its_retry_after() -> None:
    waits: list[float] = []
    with webhook_server(answers=[(429, {"Retry-After": "7"}), (503, {})]) as hook:
        post(hook.url, {"text": "hi"}, sleep=waits.append, backoff_s=2.0)
    assert [r.status for r in hook.received] == [429, 503, 200]
    assert waits == [7.0, 4.0]  # Retry-After, then the second try's backoff (2 x 2**1)
    assert hook.bodies == [{"text": "hi"}]
    assert hook.received[-1].headers["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    ("answers", "message_part", "tries"),
    [
        ([(404, {})], "HTTP 404", 1),
        ([(302, {"Location": "http://127.0.0.1:9/elsewhere"})], "HTTP 302", 1),  # not followed
        ([(429, {"Retry-After": "3600"})], "HTTP 429, retry after 3600 s", 1),
        ([(500, {})] * 4, "HTTP 500 after 4 tries", 4),
    ],
)
def test_what_fails_fails_in_one_line_without_the_secret(
    answers: list[tuple[int, dict[str, str]]], message_part: str, tries: int
) -> None:
    with webhook_server(answers=answers) as hook, pytest.raises(WebhookError) as e:
        post(hook.url, {"text": "hi"}, sleep=lambda s: None)
    assert message_part in str(e.value) and "secret-token" not in str(e.value)
    assert str(e.value).startswith("webhook http://127.0.0.1/…: ")
    assert len(hook.received) == tries


def test_a_url_urllib_would_quote_is_refused_without_its_secret() -> None:
    for url in (
        "https://hooks.slack.com/services/T0/B0/SECRETXYZ # the ml channel",
        "https://hooks.slack.com:SECRETPORT/x",
        "https://[hooks.slack.com/SECRETXYZ",
        "https://hooks.slack.com/services/SECRETXYZ\u00e9",
        "ftp://example.com/SECRETXYZ",
    ):
        with pytest.raises(WebhookError) as e:
            post(url, {"text": "hi"}, sleep=lambda s: None)
        assert "SECRET" not in str(e.value) and "not a valid http(s) URL" in str(e.value), url


def test_a_post_not_answered_in_time_is_not_sent_again() -> None:
    """Sent and maybe received: a second try could show the card twice."""
    import http.server
    import threading
    import time as clock

    got: list[bytes] = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(self.rfile.read(int(self.headers["Content-Length"])))
            clock.sleep(1.5)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises(
            WebhookError,
            match=r"no whole answer within 0\.5 s; the message may have "
            "arrived",
        ) as e:
            post(
                f"http://127.0.0.1:{server.server_address[1]}/secret-token",
                {"text": "hi"},
                timeout_s=0.5,
                sleep=lambda s: None,
            )
        assert not e.value.temporary and len(got) == 1
    finally:
        server.shutdown()
        server.server_close()


def test_an_unreachable_webhook_is_retried_then_named() -> None:
    with webhook_server() as hook:
        url = hook.url
    waits: list[float] = []
    with pytest.raises(WebhookError, match=r"^webhook http://127\.0\.0\.1/…: .* after 3 tries$"):
        post(url, {"text": "hi"}, retries=2, sleep=waits.append, backoff_s=1.0)
    assert waits == [1.0, 2.0]


def idle_run(minutes: int, **kwargs: object) -> tuple[object, ListSink]:
    sink = ListSink()
    clock = Clock()
    with track(
        name="forgotten",
        backend="simulated:idle@H100:2",
        store=False,
        clock=clock,
        threaded=False,
        log_to_python=False,
        print_summary=False,
        sinks=[sink],
        **kwargs,
    ) as run:
        for _ in range(minutes * 6):
            clock.t += 10.0
            run.sampler.sample()  # type: ignore[union-attr]
    return run.record, sink


def test_an_idle_run_gets_one_idle_alert_with_its_dollars_per_hour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two idle H100s at $3.85: $7.70 an hour burnt. The idle rule needs 30 minutes under 5%;
    the low-utilization alert (70%, 10 min) comes first."""
    with webhook_server() as hook:
        monkeypatch.setenv("GPU_KPI_ALERT_WEBHOOK", hook.url)
        record, sink = idle_run(90)
    titles = [t for t, _ in sink.alerts]
    assert titles == ["Low GPU utilization", "GPUs idle"]
    idle = sink.alerts[1][1]
    assert idle.startswith(
        "run forgotten: 2 of its 2 GPUs have been under 5% utilization for "
        "30 min, burning $7.70/h. The GPUs sat allocated but idle"
    )
    assert [b["title"] for b in hook.bodies] == [
        "gpu-kpi: Low GPU utilization",
        "gpu-kpi: GPUs idle",
    ]
    assert hook.bodies[1]["text"] == idle and hook.bodies[1]["source"] == "gpu-kpi"
    assert record.verdict == "idle"  # type: ignore[attr-defined]


def test_no_idle_alert_before_the_window_and_the_webhook_from_a_file(tmp_path: Path) -> None:
    with webhook_server() as hook:
        secret = tmp_path / "alert-webhook"
        secret.write_text(hook.url + "\n")
        config = tmp_path / "gpu-kpi.toml"
        config.write_text(f'[tracker]\nalert_webhook_file = "{secret}"\n')
        _, sink = idle_run(29, config=str(config))
    assert [t for t, _ in sink.alerts] == ["Low GPU utilization"]
    assert [b["title"] for b in hook.bodies] == ["gpu-kpi: Low GPU utilization"]


def test_a_bad_webhook_url_costs_the_webhook_not_the_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("GPU_KPI_ALERT_WEBHOOK", "https://[hooks.slack.com/SECRETXYZ")
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        record, sink = idle_run(35)
    assert record.status == "finished" and record.gpu_source == "simulated"  # type: ignore[attr-defined]
    assert [t for t, _ in sink.alerts] == ["Low GPU utilization", "GPUs idle"]
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("gpu-kpi: no alerts to the webhook: webhook ") for m in said)
    assert not any("SECRET" in m for m in said)


def test_a_webhook_that_fails_costs_a_warning_not_the_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with webhook_server(answers=[(403, {})] * 2) as hook:
        monkeypatch.setenv("GPU_KPI_ALERT_WEBHOOK", hook.url)
        with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
            record, _ = idle_run(35)
    assert record.status == "finished"  # type: ignore[attr-defined]
    warned = [r.getMessage() for r in caplog.records if "webhook" in r.getMessage()]
    assert len(warned) == 2 and all("HTTP 403" in w for w in warned)
    assert not any("secret-token" in r.getMessage() for r in caplog.records)


def test_a_webhook_file_that_is_a_pipe_is_refused_not_waited_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import os

    pipe = tmp_path / "alert-webhook"
    os.mkfifo(pipe)  # no writer: reading it would wait for ever
    config = tmp_path / "gpu-kpi.toml"
    config.write_text(f'[tracker]\nalert_webhook_file = "{pipe}"\n')
    with caplog.at_level(logging.WARNING, logger="gpu_kpi"):
        record, _ = idle_run(1, config=str(config))
    assert record.status == "finished"  # type: ignore[attr-defined]
    assert any(
        "tracker.alert_webhook_file: " in r.getMessage() and "not a regular file" in r.getMessage()
        for r in caplog.records
    )


def test_a_webhook_that_drips_its_answer_meets_the_posts_time_limit() -> None:
    """A server that takes the card and answers a byte every 0.2 s: each receive came within
    its timeout, so one such webhook held the weekly job for a quarter of an hour. With
    ``total_s`` the post ends at its bound (not sent again: it may have arrived)."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000
    sent: list[int] = []

    def serve() -> None:
        conn, _ = server.accept()
        count = 0
        with conn:
            conn.recv(65536)
            try:
                for i in range(len(answer)):
                    conn.sendall(answer[i : i + 1])
                    count += 1
                    if i > 60:
                        threading.Event().wait(0.2)
            except OSError:
                pass
        sent.append(count)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/services/T000/B000/secret-token"
    with pytest.raises(WebhookError, match=r"no whole answer within 1 s; the message may have "):
        post(url, {"text": "hi"}, total_s=1.0, sleep=lambda s: None)
    thread.join(10)
    server.close()
    assert sent and sent[0] < len(answer)  # it left mid-answer


def test_a_stop_ends_the_retries() -> None:
    """A webhook answering 503 is tried again after a wait; once the service is stopping
    (SIGTERM), no wait and no further try: one post, and the card left for later."""
    stop = [False]

    def wait(seconds: float) -> None:
        stop[0] = True  # the signal came during the first wait

    with webhook_server([(503, {})] * 5) as hook:
        with pytest.raises(WebhookError, match=r"stopped (while waiting|before it was sent)") as e:
            post(hook.url, {"text": "hi"}, sleep=wait, stopping=lambda: stop[0], backoff_s=0.01)
        assert len(hook.received) == 1
    assert e.value.temporary
