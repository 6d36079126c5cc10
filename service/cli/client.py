"""How ``cq`` reaches the service: over HTTP (``--api``, env ``CQ_API_URL``), or in process on
the local database (``--local``) through the very same app, so both give the same numbers."""

from __future__ import annotations

import getpass
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

DEFAULT_API_URL = "http://127.0.0.1:8000"


def _httpx() -> Any:
    """httpx, imported when a command first talks HTTP.

    httpx's ``__init__`` also imports its own command line (``httpx._main``: click, rich and
    pygments, 0.12 s) when those are installed; it is an optional extra (``httpx[cli]``) with
    a fallback for when it is missing, and ``cq`` never runs it. Marking the module absent
    (a ``None`` entry in ``sys.modules`` makes its import fail) takes that fallback (issue 16:
    remote commands start in under 0.4 s)."""
    import sys

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
    def from_response(cls, response: httpx.Response) -> ApiProblemError:
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


class Api:
    """A thin JSON client; every non-2xx answer raises :class:`ApiProblemError`."""

    def __init__(self, client: httpx.Client, api_key: str | None) -> None:
        self.client = client
        self.api_key = api_key
        self.sleep: Callable[[float], None] = time.sleep  # a test replaces it

    def call(self, method: str, path: str, *, json: Any = None,
             params: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
             content: bytes | None = None) -> httpx.Response:
        sent = dict(headers or {})
        if self.api_key:
            sent["Authorization"] = f"Bearer {self.api_key}"
        query = {k: v for k, v in (params or {}).items() if v is not None}
        for attempt in (1, 2):
            try:
                response = self.client.request(method, path, json=json, params=query,
                                               headers=sent, content=content)
            except _httpx().TransportError as exc:
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
        with _httpx().Client(base_url=api_url, timeout=TIMEOUT_S) as client:
            yield Api(client, api_key)
        return
    from service.api.auth import Principal, caller
    from service.catalog.keys import SCOPES
    from service.catalog.migrate import migrate_and_seed
    from service.main import create_app, dispose
    from service.settings import Settings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    # Searches run in this process (no worker pool), no start-up warm-up (a one-off command
    # would pay for it), and the access log stays quiet.
    settings = Settings(search_workers=0, log_level="warning", warm_up=False)
    migrate_and_seed(settings.resolved_database_url)
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
