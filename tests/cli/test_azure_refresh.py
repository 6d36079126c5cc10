"""A live Azure refresh talks to https://prices.azure.com only (issue 36, low): before, the
CLI followed a page's NextPageLink, and any redirect, to whatever host it named."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from service.cli.catalog import AZURE_HOST, _fetch
from service.cli.client import CliError

FIRST = "https://prices.azure.com/api/retail/prices"


def _transport(answer: Callable[[httpx.Request], httpx.Response],
               seen: list[str]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return answer(request)

    return httpx.MockTransport(handle)


def _page(next_link: object) -> httpx.Response:
    return httpx.Response(200, json={"Items": [], "NextPageLink": next_link})


def test_pages_on_the_azure_host_are_followed() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if "$skip" in str(request.url):
            return _page(None)
        return _page(f"https://{AZURE_HOST}/api/retail/prices?$skip=100")

    document, source = _fetch(httpx, "azure", "azure", _transport(answer, seen))
    pages = json.loads(document)
    assert source == "https://prices.azure.com/api/retail/prices"
    assert len(pages) == 2
    assert [url.split("?")[0] for url in seen] == [FIRST, FIRST]


@pytest.mark.parametrize("next_link", [
    "https://evil.example/api/retail/prices?$skip=100",
    "http://prices.azure.com/api/retail/prices?$skip=100",
    "https://prices.azure.com.evil.example/api/retail/prices",
    "https://user:pw@prices.azure.com/api/retail/prices",
    "https://prices.azure.com:8443/api/retail/prices",
    "file:///etc/passwd",
    12,
])
def test_a_next_page_link_off_the_azure_host_is_refused(next_link: object) -> None:
    seen: list[str] = []
    with pytest.raises(CliError, match=r"prices\.azure\.com"):
        _fetch(httpx, "azure", "azure", _transport(lambda _: _page(next_link), seen))
    assert len(seen) == 1  # only the first page was fetched


def test_a_redirect_off_the_azure_host_is_refused() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "https://evil.example/prices"})

    with pytest.raises(CliError, match=r"evil\.example"):
        _fetch(httpx, "azure", "azure", _transport(answer, seen))
    assert seen == [seen[0]]
    assert seen[0].startswith(FIRST)
