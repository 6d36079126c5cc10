"""How ``cq`` reaches the service: over HTTP (``--api``, env ``CQ_API_URL``), or in process on
the local database (``--local``) through the very same app, so both give the same numbers."""

from __future__ import annotations

import getpass
import json as jsonlib
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import email.message
    import http.client

DEFAULT_API_URL = "http://127.0.0.1:8000"


def _httpx() -> Any:
    """httpx, imported when a command first talks HTTP.

    httpx's ``__init__`` also imports its own command line (``httpx._main``: click, rich and
    pygments, 0.12 s) when those are installed; it is an optional extra (``httpx[cli]``) with
    a fallback for when it is missing, and ``cq`` never runs it. Marking the module absent
    (a ``None`` entry in ``sys.modules`` makes its import fail) takes that fallback (issue 16:
    remote commands start in under 0.4 s)."""
    if "httpx" not in sys.modules and "httpx._main" not in sys.modules:
        sys.modules["httpx._main"] = None  # type: ignore[assignment]
    import httpx

    return httpx


TIMEOUT_S = 660.0  # above the longest search deadline the service accepts (600 s)
MAX_RETRY_WAIT_S = 10.0
"""A 503 is retried once, after its ``Retry-After`` (delta-seconds or an HTTP date; 1 s when
absent), waiting at most this long; a longer ``Retry-After`` is not waited for."""


def retry_wait_s(retry_after: str | None, now_s: float | None = None) -> float | None:
    """Seconds to wait before the one retry of a 503, or None not to retry (the server asks
    for longer than :data:`MAX_RETRY_WAIT_S`)."""
    if not retry_after:
        return 1.0
    text = retry_after.strip()
    if text.isdigit():
        wait = float(text)
    else:
        import email.utils

        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return 1.0
        wait = max(0.0, when.timestamp() - (time.time() if now_s is None else now_s))
    return wait if wait <= MAX_RETRY_WAIT_S else None


class CliError(Exception):
    """Something to tell the user in one line; exit code 2 (1 is for problems)."""


@dataclass
class ApiProblemError(Exception):
    """An RFC 9457 problem the service answered (``body``: the problem document as sent)."""

    status: int
    title: str
    detail: str
    errors: list[dict[str, Any]] = field(default_factory=list)
    body: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_response(cls, response: Response) -> ApiProblemError:
        try:
            body = response.json()
        except ValueError:
            body = {}
        if not isinstance(body, dict):
            body = {}
        return cls(status=response.status_code,
                   title=str(body.get("title") or response.reason_phrase or "Error"),
                   detail=str(body.get("detail") or response.text[:500]),
                   errors=[e for e in body.get("errors") or [] if isinstance(e, dict)],
                   body=body)


class Response(Protocol):
    """What ``cq`` reads of an answer: :class:`HttpResponse` over the network, httpx's
    response in process (``--local``, FastAPI's test client) and in tests."""

    status_code: int
    content: bytes

    @property
    def reason_phrase(self) -> str: ...

    @property
    def text(self) -> str: ...

    @property
    def headers(self) -> Any: ...

    def json(self) -> Any: ...


class HttpResponse:
    """One answer read in full by :class:`HttpClient`."""

    def __init__(self, status_code: int, reason_phrase: str,
                 headers: email.message.Message, content: bytes) -> None:
        self.status_code = status_code
        self._reason_phrase = reason_phrase
        self._headers = headers
        self.content = content

    @property
    def reason_phrase(self) -> str:
        return self._reason_phrase

    @property
    def headers(self) -> email.message.Message:
        """Case-insensitive ``get``, as HTTP header names are."""
        return self._headers

    @property
    def text(self) -> str:
        return self.content.decode(self._headers.get_content_charset() or "utf-8", "replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class HttpClient:
    """HTTP/1.1 to one service from the standard library, the connection kept alive between
    requests (a paged listing reuses it).

    Remote ``cq`` commands use this rather than httpx, whose import alone costs 0.2-0.3 s of
    start-up on the 2-core development machine (``python -X importtime``; issue 16: remote
    commands start in under 0.4 s, benchmarks/cli_startup.py). It honours the proxy settings
    httpx does (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``, read by
    ``urllib.request.getproxies``; credentials in the proxy's URL are sent as
    ``Proxy-Authorization: Basic``) and verifies TLS with the system's certificates (or
    ``SSL_CERT_FILE``)."""

    def __init__(self, base_url: str, timeout: float) -> None:
        # Imported here, not at the top: ``cq --help`` needs none of them.
        import urllib.request
        from urllib.parse import urlsplit

        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CliError(f"--api {base_url!r} is not an http:// or https:// address")
        self.base_url = base_url.rstrip("/")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._netloc = parts.netloc
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._proxy: tuple[str, int | None] | None = None
        """The proxy's host and port, where the environment names one for this address."""
        self._proxy_auth: dict[str, str] = {}
        self._connection: http.client.HTTPConnection | None = None
        self._reused = False
        proxies = urllib.request.getproxies()
        if self._scheme in proxies and not urllib.request.proxy_bypass(parts.netloc):
            url = proxies[self._scheme]
            proxy = urlsplit(url if "://" in url else "http://" + url)
            self._proxy = (proxy.hostname or "", proxy.port)
            if proxy.username is not None:
                import base64
                from urllib.parse import unquote

                user = f"{unquote(proxy.username)}:{unquote(proxy.password or '')}"
                self._proxy_auth = {"Proxy-Authorization": "Basic " + base64.b64encode(
                    user.encode()).decode("ascii")}

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _connect(self) -> http.client.HTTPConnection:
        import http.client

        if self._connection is not None:
            if not _closed_by_peer(self._connection):
                self._reused = True
                return self._connection
            self.close()  # the server closed it while idle (uvicorn after 5 s)
        self._reused = False
        host, port = self._proxy or (self._host, self._port)
        connection: http.client.HTTPConnection
        if self._scheme == "https" and self._proxy is None:
            connection = http.client.HTTPSConnection(host, port, timeout=self._timeout)
        elif self._scheme == "https":
            # Through an HTTP proxy: CONNECT to the service, then TLS end to end.
            import ssl

            connection = http.client.HTTPSConnection(
                host, port, timeout=self._timeout, context=ssl.create_default_context())
            connection.set_tunnel(self._host, self._port, headers=self._proxy_auth or None)
        else:
            connection = http.client.HTTPConnection(host, port, timeout=self._timeout)
        self._connection = connection
        return connection

    def _target(self, path: str, params: dict[str, Any] | None) -> str:
        from urllib.parse import urlencode

        query = urlencode([(k, _param(v)) for k, v in (params or {}).items()])
        target = self._prefix + path + ("?" + query if query else "")
        if self._proxy is not None and self._scheme == "http":
            return f"http://{self._netloc}{target}"  # absolute form, for the proxy
        return target

    def request(self, method: str, path: str, *, json: Any = None,
                params: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
                content: bytes | None = None) -> HttpResponse:
        import http.client

        sent = {"Accept": "*/*", "User-Agent": "cq"}
        body = content
        if json is not None:
            body = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"),
                                 allow_nan=False).encode()
            sent["Content-Type"] = "application/json"
        if self._proxy is not None and self._scheme == "http":
            sent.update(self._proxy_auth)  # a plain-HTTP proxy reads it from each request
        sent.update(headers or {})
        target = self._target(path, params)
        for attempt in (1, 2):
            connection = self._connect()
            try:
                connection.request(method, target, body=body, headers=sent)
                answer = connection.getresponse()
                data = answer.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A kept-alive connection that died as the request went out (closed by the
                # server between the idle check and the send): sent once more on a new one,
                # only where repeating it is safe (idempotent methods, or an Idempotency-Key).
                self.close()
                if attempt == 2 or not self._reused or not (
                        method in IDEMPOTENT_METHODS or "Idempotency-Key" in sent):
                    raise
                continue
            except BaseException:
                self.close()
                raise
            if answer.will_close:
                self.close()
            return HttpResponse(answer.status, answer.reason, answer.headers, data)
        raise AssertionError("unreachable")


IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
"""RFC 9110 section 9.2.2: methods whose repetition has the effect of one request."""


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """Whether an idle kept-alive connection was closed by the server: its socket is readable
    (end of file, or bytes nobody asked for) while no request is out, which is how httpcore
    decides a pooled connection has expired."""
    import select

    sock = connection.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _param(value: Any) -> str:
    """A query value as httpx writes it (booleans in lower case)."""
    if value is True or value is False:
        return "true" if value else "false"
    return str(value)


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What failing to reach the service raises: the standard library's socket and HTTP
    errors, and httpx's when a test or ``--local`` uses an httpx client."""
    import http.client

    errors: tuple[type[BaseException], ...] = (OSError, http.client.HTTPException)
    httpx = sys.modules.get("httpx")
    if httpx is not None:
        errors += (httpx.TransportError,)
    return errors


class Api:
    """A thin JSON client; every non-2xx answer raises :class:`ApiProblemError`."""

    def __init__(self, client: Any, api_key: str | None) -> None:
        self.client = client
        self.api_key = api_key
        self.sleep: Callable[[float], None] = time.sleep  # a test replaces it

    def call(self, method: str, path: str, *, json: Any = None,
             params: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
             content: bytes | None = None) -> Response:
        sent = dict(headers or {})
        if self.api_key:
            sent["Authorization"] = f"Bearer {self.api_key}"
        query = {k: v for k, v in (params or {}).items() if v is not None}
        for attempt in (1, 2):
            try:
                response: Response = self.client.request(
                    method, path, json=json, params=query, headers=sent, content=content)
            except _transport_errors() as exc:
                raise CliError(f"cannot reach the service at {self.client.base_url}: {exc}. "
                               "Start it (cq serve), point --api/CQ_API_URL at it, or use "
                               "--local") from None
            # One retry of a 503 (shed under load, or a deadline): the service stored
            # nothing, and quotes carry an Idempotency-Key, so sending it again is safe.
            wait = retry_wait_s(response.headers.get("Retry-After"))
            if response.status_code != 503 or attempt == 2 or wait is None:
                break
            self.sleep(wait)
        if response.status_code >= 400:
            raise ApiProblemError.from_response(response)
        return response


@contextmanager
def connect(api_url: str, api_key: str | None, local: bool) -> Iterator[Api]:
    if not local:
        with HttpClient(api_url, TIMEOUT_S) as client:
            yield Api(client, api_key)
        return
    from service.api.auth import Principal, caller
    from service.catalog.keys import SCOPES
    from service.catalog.migrate import SchemaAheadError, migrate_and_seed
    from service.main import create_app, dispose
    from service.settings import Settings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    # Searches run in this process (no worker pool), no start-up warm-up (a one-off command
    # would pay for it), and the access log stays quiet.
    settings = Settings(search_workers=0, log_level="warning", warm_up=False)
    try:
        migrate_and_seed(settings.resolved_database_url)
    except SchemaAheadError as error:
        raise CliError(str(error)) from None
    app = create_app(settings)
    if not api_key:
        # Whoever runs --local can already write the database; they act as local:<user>.
        me = Principal(name=f"local:{getpass.getuser()}"[:128], scopes=tuple(SCOPES))
        app.dependency_overrides[caller] = lambda: me
    try:
        with TestClient(app, base_url="http://local", raise_server_exceptions=False) as client:
            client.timeout = TIMEOUT_S
            yield Api(client, api_key)
    finally:
        dispose(app)
