"""``cq``'s standard-library HTTP client (remote commands): what it sends, keep-alive, the
retry of a request on a connection the server closed while idle, proxies, and that a remote
command never imports httpx (issue 16: remote commands start in under 0.4 s)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from service.cli.client import Api, ApiProblemError, CliError, HttpClient


class Recorder:
    """A tiny HTTP/1.1 server that records what it was sent and answers JSON."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.connections: set[tuple[str, int]] = set()
        self.drop_after_answer = False
        self.dropped = threading.Event()
        """Set once the server has closed a connection after its answer."""
        self.drop_unanswered: set[str] = set()
        """Paths read and then left unanswered (the connection closed), once each."""
        self.status = 200
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: object) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                recorder.connections.add(self.client_address)
                recorder.seen.append({"method": self.command, "path": self.path,
                                      "headers": dict(self.headers), "body": body})
                if self.path in recorder.drop_unanswered:
                    recorder.drop_unanswered.discard(self.path)
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                payload = json.dumps({"n": len(recorder.seen), "title": "Nope",
                                      "detail": "refused"}).encode()
                self.send_response(recorder.status)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()
                if recorder.drop_after_answer:
                    # Closed without saying so, as an idle keep-alive connection is.
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    recorder.dropped.set()

            do_GET = do_POST = _answer  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    yield server
    server.stop()


def test_sends_json_query_and_headers_like_httpx(recorder: Recorder) -> None:
    with HttpClient(recorder.url + "/", 5.0) as client:
        api = Api(client, "k_secret")
        answer = api.call("POST", "/v1/estimates", json={"a": "é", "b": [1, 2.5]},
                          params={"dry_run": True, "page_size": 3, "skip": None})
        assert answer.json()["n"] == 1
        assert answer.status_code == 200
        assert answer.headers.get("content-type").startswith("application/json")
    sent = recorder.seen[0]
    assert sent["method"] == "POST"
    assert sent["path"] == "/v1/estimates?dry_run=true&page_size=3"  # None left out
    assert json.loads(sent["body"]) == {"a": "é", "b": [1, 2.5]}
    assert sent["body"] == '{"a":"é","b":[1,2.5]}'.encode()
    assert sent["headers"]["Content-Type"] == "application/json"
    assert sent["headers"]["Authorization"] == "Bearer k_secret"


def test_json_that_is_not_json_is_refused_before_sending(recorder: Recorder) -> None:
    with HttpClient(recorder.url, 5.0) as client, pytest.raises(ValueError, match="JSON"):
        client.request("POST", "/v1/estimates", json={"x": float("nan")})
    assert recorder.seen == []


def test_keeps_the_connection_alive_across_pages(recorder: Recorder) -> None:
    with HttpClient(recorder.url, 5.0) as client:
        for _ in range(3):
            client.request("GET", "/v1/offers")
    assert len(recorder.seen) == 3
    assert len(recorder.connections) == 1


def test_a_connection_closed_while_idle_is_replaced_before_sending(
        recorder: Recorder) -> None:
    recorder.drop_after_answer = True
    with HttpClient(recorder.url, 5.0) as client:
        assert client.request("GET", "/a").json()["n"] == 1
        # The server closed the connection after its answer (waited for, so the test does not
        # race it); the next request sees it closed before sending and goes out once, on a
        # new connection, though an unkeyed POST is never resent.
        assert recorder.dropped.wait(10)
        assert client.request("POST", "/b", json={}).json()["n"] == 2
    assert [s["path"] for s in recorder.seen] == ["/a", "/b"]  # each sent once
    assert len(recorder.connections) == 2


def test_only_a_repeatable_request_is_resent_when_the_connection_dies_with_it(
        recorder: Recorder) -> None:
    """A kept-alive connection that dies with a request on it: a GET (or a POST carrying an
    Idempotency-Key) is sent again on a new connection; another POST is not (the server may
    have acted on it), and the caller is told."""
    import http.client

    with HttpClient(recorder.url, 5.0) as client:
        client.request("GET", "/warm")
        recorder.drop_unanswered = {"/read"}
        assert client.request("GET", "/read").status_code == 200
        client.request("GET", "/warm")
        recorder.drop_unanswered = {"/keyed"}
        assert client.request("POST", "/keyed", json={},
                              headers={"Idempotency-Key": "k1"}).status_code == 200
        client.request("GET", "/warm")
        recorder.drop_unanswered = {"/import"}
        with pytest.raises(http.client.RemoteDisconnected):
            client.request("POST", "/import", content=b"x")
    paths = [s["path"] for s in recorder.seen]
    assert paths.count("/read") == 2
    assert paths.count("/keyed") == 2
    assert paths.count("/import") == 1


def test_a_problem_answer_raises_with_the_document(recorder: Recorder) -> None:
    recorder.status = 422
    with HttpClient(recorder.url, 5.0) as client, pytest.raises(ApiProblemError) as raised:
        Api(client, None).call("GET", "/v1/offers")
    assert raised.value.status == 422
    assert raised.value.title == "Nope"
    assert raised.value.detail == "refused"


def test_a_path_prefix_in_the_address_is_kept(recorder: Recorder) -> None:
    with HttpClient(recorder.url + "/computequote/", 5.0) as client:
        client.request("GET", "/v1/offers", params={"term": "spot"})
    assert recorder.seen[0]["path"] == "/computequote/v1/offers?term=spot"


def test_an_http_proxy_gets_the_absolute_address(
        recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("http_proxy", recorder.url)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    with HttpClient("http://service.invalid:8000", 5.0) as client:
        client.request("GET", "/v1/offers")
    assert recorder.seen[0]["path"] == "http://service.invalid:8000/v1/offers"
    assert "Proxy-Authorization" not in recorder.seen[0]["headers"]
    # Credentials in the proxy's URL are sent as Basic proxy authorisation.
    monkeypatch.setenv("http_proxy", recorder.url.replace("://", "://me:p%40ss@"))
    with HttpClient("http://service.invalid:8000", 5.0) as client:
        client.request("GET", "/v1/offers")
    assert recorder.seen[1]["headers"]["Proxy-Authorization"] == "Basic bWU6cEBzcw=="
    monkeypatch.setenv("no_proxy", "service.invalid")
    with HttpClient("http://service.invalid:8000", 5.0) as client:
        assert client._proxy is None  # bypassed: no request goes to the proxy


def test_an_address_that_is_not_http_is_a_usage_error() -> None:
    for address in ("ftp://example.com", "127.0.0.1:8000", "http://"):
        with pytest.raises(CliError, match="http"):
            HttpClient(address, 5.0)


def test_an_unreachable_service_is_reported_not_raised() -> None:
    with HttpClient("http://127.0.0.1:9", 5.0) as client, pytest.raises(CliError) as raised:
        Api(client, None).call("GET", "/v1/offers")
    assert "cannot reach the service at http://127.0.0.1:9" in str(raised.value)


def test_a_remote_command_never_imports_httpx(recorder: Recorder) -> None:
    """The start-up target of remote commands rests on this (benchmarks/cli_startup.py)."""
    probe = ("import sys\nfrom service.cli import main\n"
             f"sys.argv = ['cq', 'offers', '--json', '--api', {recorder.url!r}]\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print('HEAVY', ' '.join(m for m in ('httpx', 'httpcore', 'fastapi', 'sqlalchemy')"
             " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,  # noqa: S603
                         check=True, cwd=Path(__file__).resolve().parents[2]).stdout
    assert recorder.seen
    assert recorder.seen[0]["path"].startswith("/v1/offers?")
    assert out.splitlines()[-1].strip() == "HEAVY"
