"""The CLI's paged reads end whatever the server answers (issue 36's loop audit): a server
that repeats a page token, or never stops giving one, is a clear CliError, not a loop."""

from __future__ import annotations

from typing import Any

import pytest

from service.cli import common
from service.cli.client import CliError


class _Answer:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def json(self) -> dict[str, Any]:
        return self.body


class _Server:
    """Answers each page from ``next_token(n)``, the n-th call's next_page_token."""

    def __init__(self, next_token: Any) -> None:
        self.next_token = next_token
        self.calls = 0

    def call(self, method: str, path: str, params: dict[str, Any]) -> _Answer:
        self.calls += 1
        return _Answer({"items": [{"n": self.calls}], "next_page_token": self.next_token(
            self.calls)})


def test_a_list_that_ends_is_read_whole() -> None:
    server = _Server(lambda n: f"t{n}" if n < 5 else None)
    items = common._paged(server, "/v1/models", {"page_size": 200})  # type: ignore[arg-type]
    assert [item["n"] for item in items] == [1, 2, 3, 4, 5]


def test_a_repeated_token_is_an_error_not_a_loop() -> None:
    server = _Server(lambda n: "same")
    with pytest.raises(CliError, match="already given"):
        common._paged(server, "/v1/models", {})  # type: ignore[arg-type]
    assert server.calls == 2


def test_a_list_that_never_ends_stops_at_the_page_cap() -> None:
    server = _Server(lambda n: f"t{n}")
    with pytest.raises(CliError, match="more than 7 pages"):
        common._paged(server, "/v1/quotes/q_x/lines", {}, max_pages=7)  # type: ignore[arg-type]
    assert server.calls == 7
    assert common.MAX_PAGES * 200 >= 100_000
