"""The portal's Serve tab (issue 19): the figures are POST /v1/serving-estimates', the chart is
a sweep of the same estimate from low load up to one replica's capacity, errors are summarised
at the top naming their fields, and a deployment that cannot fit says so first."""

from __future__ import annotations

import copy
import itertools
import re
import xml.etree.ElementTree as ET

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape

from service.api import presentation as fmt
from service.api.schemas.serving import SERVING_EXAMPLE
from service.api.ui import latency_chart
from service.api.ui import serve as ui_serve
from tests.api.test_ui import error_of, parse

SVG = "{http://www.w3.org/2000/svg}"


def _svg(html: str, ident: str) -> ET.Element:
    match = re.search(rf'<svg [^>]*id="{ident}".*?</svg>', html, re.S)
    assert match, f"no chart {ident}"
    return ET.fromstring(match.group(0))  # noqa: S314 - our own output


def _points(svg: ET.Element) -> list[tuple[float, float]]:
    return [(float(e.get("data-x", "nan")), float(e.get("data-y", "nan")))
            for e in svg.iter() if "point" in (e.get("class") or "").split()]


def _summary(html: str) -> list[tuple[str, str]]:
    block = re.search(r'<div class="error-summary".*?</div>', html, re.S)
    assert block, "no error summary"
    return re.findall(r'<a href="#([^"]+)">([^<]*)</a>', block.group(0))


def test_the_form_builds_the_issues_example_and_links_the_tabs(client: TestClient) -> None:
    # The defaults are the issue's example, field for field.
    assert ui_serve.serving_body(dict(ui_serve.SERVE_DEFAULTS)) == SERVING_EXAMPLE
    response = client.get("/ui/serve")
    assert response.status_code == 200
    page = parse(response.text)
    assert len(page.inputs) == len(ui_serve.SERVE_DEFAULTS)  # every field, each labelled
    assert all(i["id"] in page.labels for i in page.inputs)
    assert page.external == []
    assert '<a href="/ui/serve" aria-current="page">Serve</a>' in response.text
    assert 'option value="llama3.1-405b"' in response.text  # presets from the API
    train = client.get("/ui").text
    assert '<a href="/ui" aria-current="page">Train</a>' in train
    assert '<a href="/ui/serve">Serve</a>' in train


def test_the_page_shows_the_apis_figures(client: TestClient) -> None:
    body = copy.deepcopy(SERVING_EXAMPLE)
    body["deployment"]["price_per_gpu_hour_usd"] = "2.50"
    api = client.post("/v1/serving-estimates", json=body).json()
    response = client.post("/ui/serve", data={"price_per_gpu_hour": "2.50"})
    assert response.status_code == 200
    html = response.text
    figure = re.compile(r'<dd id="([a-z-]+)">([^<]*)</dd>')
    shown = dict(figure.findall(html))
    assert shown["weights-per-gpu"] == fmt.gib(api["memory"]["weights_bytes_per_gpu"])
    # 70.6e9 parameters x 1 byte (FP8) / TP 4 = 16.4 GiB.
    assert shown["weights-per-gpu"] == "16.4 GiB"
    # GQA KV cache per token per GPU: 2 x 80 layers x 8 KV heads x 128 x 1 byte (FP8) / TP 4.
    assert api["memory"]["kv_cache_bytes_per_token"] == 2 * 80 * 8 * 128 * 1 / 4
    assert shown["kv-per-token"] == "40.0 KiB"
    assert shown["max-concurrency"] == f"{api['memory']['max_concurrency']:,} sequences per replica"
    assert shown["replicas"] == (f"{api['sizing']['replicas']:,} "
                                 f"({api['sizing']['num_gpus']:,} GPUs)")
    assert shown["meets-slo"] == ("Yes" if api["sizing"]["meets_slo"] else "No")
    assert shown["output-tps"].startswith(fmt.number(api["throughput"]["output_tokens_per_s"]))
    # 2.50 USD x 4 GPUs / (10 requests/s x 256 tokens x 3,600 s) x 1e6 = 1.0851 USD.
    assert api["cost"]["usd_per_million_output_tokens"] == "1.0851"
    assert shown["cost-per-m"] == "1.09 USD"
    table = re.search(r'<table id="latency".*?</table>', html, re.S)
    assert table
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        for quantile in ("p50", "p99"):
            assert fmt.duration(api["latency"][key][quantile]) in table.group(0)
    assert "does-not-fit" not in html
    for assumption in api["assumptions"]:
        assert str(escape(assumption[1:])) in html  # as a sentence: its first letter capital


def test_the_chart_sweeps_load_up_to_one_replicas_capacity(client: TestClient) -> None:
    api = client.post("/v1/serving-estimates", json=SERVING_EXAMPLE).json()
    html = client.post("/ui/serve", data={}).text
    capacity = api["throughput"]["capacity_requests_per_s"]
    ttft = _points(_svg(html, "serve-ttft"))
    tpot = _points(_svg(html, "serve-tpot"))
    assert len(ttft) == len(tpot) == len(ui_serve.SWEEP_FRACTIONS) == 10
    xs = [x for x, _ in ttft]
    assert all(a < b for a, b in itertools.pairwise(xs))  # throughput increases
    ys = [y for _, y in ttft]
    assert all(a <= b for a, b in itertools.pairwise(ys))  # p99 TTFT never falls
    assert all(a <= b for a, b in itertools.pairwise(y for _, y in tpot))
    # Each point is the API's answer at that share of capacity: output tokens/s = rate x 256.
    for share, (x, _) in zip(ui_serve.SWEEP_FRACTIONS, ttft, strict=True):
        assert x == pytest.approx(capacity * share * 256, rel=1e-9)
    low = copy.deepcopy(SERVING_EXAMPLE)
    low["traffic"]["requests_per_s"] = capacity * 0.05
    del low["traffic"]["slo"]
    first = client.post("/v1/serving-estimates", json=low).json()
    assert ttft[0][1] == pytest.approx(first["latency"]["ttft_s"]["p99"], rel=1e-12)
    assert tpot[0][1] == pytest.approx(first["latency"]["tpot_s"]["p99"] * 1e3, rel=1e-12)
    # The requested load: 10 requests/s x 256 tokens on one replica, at the API's p99 TTFT.
    svg = _svg(html, "serve-ttft")
    star = next(e for e in svg.iter(f"{SVG}polygon") if e.get("class") == "marked")
    assert float(star.get("data-x", "0")) == 2560.0
    assert float(star.get("data-y", "0")) == pytest.approx(api["latency"]["ttft_s"]["p99"])
    slo = next(e for e in svg.iter(f"{SVG}line") if e.get("class") == "slo")
    assert slo.find(f"{SVG}title").text == "SLO p99 TTFT 2 s"  # type: ignore[union-attr]
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    assert "output tokens/s per replica" in texts
    assert "p99 TTFT (s)" in texts
    assert "p99 TPOT (ms)" in [t.text for t in _svg(html, "serve-tpot").iter(f"{SVG}text")]
    assert texts.count("0") == 2  # both axes start at zero
    assert len(re.findall(r'<tbody>\s*(?:<tr>.*?</tr>\s*){10}</tbody>',
                          re.search(r'<table id="sweep".*?</table>', html, re.S)
                          .group(0), re.S)) == 1  # type: ignore[union-attr]
    assert 'id="serve-ttft-narrow"' in html  # drawn for phones too


@pytest.mark.parametrize(("form", "field", "message"), [
    ({"tp": "0"}, "tp", "Tensor parallel (TP): Input should be greater than or equal to 1"),
    ({"requests_per_s": "-1"}, "requests_per_s",
     "Requests per second: Input should be greater than or equal to 0.000001"),
    ({"requests_per_s": ""}, "requests_per_s", "Requests per second: online traffic needs "
                                               "exactly one of requests_per_s and concurrency"),
    ({"tp": "8"}, "gpus_per_replica",
     "GPUs per replica: tp x pp (8 x 1) must equal gpus_per_replica (4)"),
    ({"ttft_p99": "0"}, "ttft_p99", "TTFT p99 SLO (s): Input should be greater than 0"),
    ({"prompt_tokens": "many"}, "prompt_tokens",
     "Prompt tokens (mean): Input should be a valid number"),
])
def test_a_bad_field_is_summarised_at_the_top_and_marked(
        client: TestClient, form: dict[str, str], field: str, message: str) -> None:
    response = client.post("/ui/serve", data=form)
    assert response.status_code == 422
    html = response.text
    assert _summary(html) == [(f"f-{field}", message)]
    assert html.index('id="error-summary"') < html.index("<form")
    assert error_of(html, field) == message.split(": ", 1)[1]
    assert re.search(rf'id="f-{field}"[^>]*aria-invalid="true"', html, re.S)
    assert 'id="result-heading"' not in html
    if "=" not in form.get(field, "="):
        assert f'value="{form[field]}"' in html  # what was typed stays in the field


def test_a_model_that_cannot_fit_says_so_first(client: TestClient) -> None:
    form = {"model": "llama3.1-405b", "weight_precision": "bf16", "gpus_per_replica": "1",
            "tp": "1"}
    response = client.post("/ui/serve", data=form)
    assert response.status_code == 200
    html = response.text
    assert html.index('id="does-not-fit"') < html.index('id="serve-figures"')
    # 405.9e9 parameters x 2 bytes (BF16) on one GPU: 756.0 GiB of weights.
    assert "The weights take 756.0 GiB per GPU" in html
    assert re.search(r'<dd class="bad">No: ', html)
    assert "Replicas (would not run)" in html
    assert 'id="serve-ttft"' not in html  # no load is served: no chart
    assert 'id="no-chart"' in html


def test_offline_traffic_draws_the_curve_without_a_requested_load(client: TestClient) -> None:
    html = client.post("/ui/serve", data={"mode": "offline"}).text
    svg = _svg(html, "serve-ttft")
    assert len(_points(svg)) == 10
    assert not [e for e in svg.iter(f"{SVG}polygon") if e.get("class") == "marked"]


def test_points_above_the_cut_sit_on_the_top_edge_and_say_so() -> None:
    points = [latency_chart.CurvePoint(x=100.0 * i, y=y, label=f"load {i}")
              for i, y in enumerate([0.1, 0.2, 0.4, 50_000.0], start=1)]
    marked = latency_chart.CurvePoint(x=250.0, y=0.3, label="asked")
    svg = ET.fromstring(latency_chart.latency_curve(  # noqa: S314 - our own output
        "c", "p99 TTFT", points, marked=marked, limit=2.0, limit_label="SLO 2 s",
        series="p99 TTFT", x_unit="tokens/s", y_label="p99 TTFT (s)", y_unit="s"))
    # Cut at 2.5 x the SLO (the largest reference): ticks 0 .. 6 s, not 0 .. 50,000.
    texts = [t.text or "" for t in svg.iter(f"{SVG}text")]
    assert "off scale (above 6 s)" in texts
    off = [e for e in svg.iter(f"{SVG}polygon") if "off-scale" in (e.get("class") or "")]
    assert len(off) == 1
    assert off[0].get("data-y") == "50000.0"
    description = svg.find(f"{SVG}desc").text or ""  # type: ignore[union-attr]
    assert "400 tokens/s: 5e+04 s" in description
    assert "1 loads above 6 s are drawn on the top edge" in description
    legends = [t for t in svg.iter(f"{SVG}text") if t.get("class") == "legend"]
    assert [t.text for t in legends] == ["p99 TTFT", "SLO 2 s", "requested load",
                                         "off scale (above 6 s)"]
    assert all(float(t.get("font-size", "0")) >= 11 for t in legends)
