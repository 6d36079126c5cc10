"""The portal's what-if page (issue 42): the sweep's answer, server-rendered, with a tornado
chart of each variation's change in training time, largest first, labelled, and every
coordinate finite."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET

import pytest
from fastapi.testclient import TestClient

from service.api import presentation as fmt
from service.api.schemas.whatifs import WHAT_IF_EXAMPLE
from service.api.ui import charts, tornado

SVG = "{http://www.w3.org/2000/svg}"


def _svg(html: str, ident: str) -> ET.Element:
    match = re.search(rf'<svg [^>]*id="{ident}".*?</svg>', html, re.S)
    assert match, f"no chart {ident}"
    return ET.fromstring(match.group(0))  # noqa: S314 - our own output


def _bars(svg: ET.Element) -> list[ET.Element]:
    return [e for e in svg.iter(f"{SVG}rect") if e.get("class") == "bar"]


def _numbers(svg: ET.Element) -> list[float]:
    """Every coordinate and size of the drawing."""
    out = []
    for element in svg.iter():
        if element.tag == f"{SVG}svg":
            continue  # width="100%"
        for name in ("x", "y", "x1", "x2", "y1", "y2", "width", "height"):
            if element.get(name) is not None:
                out.append(float(element.get(name, "nan")))
    return out


class TestWhatIfPage:
    def test_the_form_starts_from_the_documented_example(self, client: TestClient) -> None:
        page = client.get("/ui/what-if")
        assert page.status_code == 200
        assert "llama3.1-70b" in page.text
        assert '<textarea id="f-body" name="body"' in page.text

    def test_the_answer_has_a_bar_per_variation_largest_first(
            self, client: TestClient) -> None:
        page = client.post("/ui/what-if", data={"body": json.dumps(WHAT_IF_EXAMPLE)})
        assert page.status_code == 200, page.text
        answer = client.post("/v1/what-ifs", json=WHAT_IF_EXAMPLE).json()
        svg = _svg(page.text, "whatif-tornado")
        bars = _bars(svg)
        assert len(bars) == len(WHAT_IF_EXAMPLE["variations"])
        # Widths follow |delta time| in the ranking's order; the labels name the variations.
        widths = [float(b.get("width", "nan")) for b in bars]
        assert widths == sorted(widths, reverse=True)
        titles = [b.findtext(f"{SVG}title") or "" for b in bars]
        ranked = [f"{r['index']}: {answer['variations'][r['index']]['name']}"
                  for r in answer["ranking"]]
        assert [t.rsplit(":", 1)[0] for t in titles] == ranked
        labels = " ".join("".join(t.itertext()) for t in svg.iter(f"{SVG}text")
                          if t.get("class") == "bar-label")
        for name in ranked:
            assert name in labels
        # Longer runs go right of the zero line, shorter ones left.
        slower = next(r for r in answer["ranking"] if r["train_s_delta"] > 0)
        position = [r["index"] for r in answer["ranking"]].index(slower["index"])
        zero = next(e for e in svg.iter(f"{SVG}line") if e.get("stroke-width") == "1.5")
        assert float(bars[position].get("x", "nan")) == pytest.approx(
            float(zero.get("x1", "nan")), abs=0.1)
        assert "longer" in titles[position]
        assert all(math.isfinite(v) for v in _numbers(svg))
        # The table lists each variation with its training time.
        for row in answer["variations"]:
            assert fmt.duration(row["summary"]["train_s"]) in page.text
        assert _svg(page.text, "whatif-tornado-narrow") is not None

    def test_a_variations_error_is_a_row_and_not_a_bar(self, client: TestClient) -> None:
        body = {**WHAT_IF_EXAMPLE, "variations": [
            *WHAT_IF_EXAMPLE["variations"][:1], {"set": {"parallelism.tp": 7}}]}
        page = client.post("/ui/what-if", data={"body": json.dumps(body)})
        assert page.status_code == 200
        assert len(_bars(_svg(page.text, "whatif-tornado"))) == 1
        assert "invalid-spec" in page.text

    def test_an_unknown_path_is_summarised(self, client: TestClient) -> None:
        body = {**WHAT_IF_EXAMPLE, "variations": [{"set": {"cluster.fabirc.rails": 8}}]}
        page = client.post("/ui/what-if", data={"body": json.dumps(body)})
        assert page.status_code == 422
        assert "There is a problem" in page.text
        assert "cluster.fabirc.rails" in page.text
        assert client.post("/ui/what-if", data={"body": "{not json"}).status_code == 422
        # NaN is not JSON, but Python's parser reads it: the API names the field, no 500.
        nan = json.dumps({**WHAT_IF_EXAMPLE, "variations": [
            {"set": {"training.tokens": float("nan")}}]})
        page = client.post("/ui/what-if", data={"body": nan})
        assert page.status_code == 200
        assert "finite" in page.text


@pytest.mark.parametrize("values", [
    [float("nan"), 3.0], [float("inf"), -2.0], [1e308, -1e308], [0.0, 0.0], [5e-324], []])
def test_the_chart_stays_finite_for_any_values(values: list[float]) -> None:
    bars = [charts.Part(f"v{i}", v) for i, v in enumerate(values)]
    for width in (charts.WIDE_W, charts.NARROW_W):
        svg = ET.fromstring(tornado.tornado("t", "title", bars, unit="days",  # noqa: S314
                                            width=width))
        assert all(math.isfinite(v) for v in _numbers(svg))
        assert len(_bars(svg)) == sum(math.isfinite(v) for v in values)


def test_every_portal_tab_links_to_the_what_if_page(client: TestClient) -> None:
    for path in ("/ui", "/ui/serve", "/ui/what-if"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert '<a href="/ui/what-if"' in page.text, path
    assert 'href="/ui/what-if" aria-current="page"' in client.get("/ui/what-if").text
