"""Hardware catalogue and model presets."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Request, Response

from service.api.auth import Principal, require
from service.api.deps import SessionDep, commit_before_answer
from service.api.pagination import PageSize, PageToken, decode_token, encode_token
from service.api.problems import problem_responses
from service.api.schemas.catalog import (
    ACCELERATOR_EXAMPLE,
    AcceleratorIn,
    AcceleratorOut,
    ModelPresetOut,
)
from service.api.schemas.common import Page
from service.catalog.offers import MICROS
from service.catalog.repository import create_accelerator as store_accelerator
from service.catalog.repository import get_accelerator as fetch_accelerator
from service.catalog.repository import list_accelerators as fetch_accelerators
from service.core.presets import PRESETS

router = APIRouter()
CatalogWrite = Annotated[Principal, require("catalog:write")]


@router.get(
    "/v1/accelerators", tags=["accelerators"], summary="List accelerators",
    response_model=Page[AcceleratorOut], status_code=200, responses=problem_responses(400, 422),
)
def list_accelerators(
    session: SessionDep, page_size: PageSize = 50, page_token: PageToken = None
) -> Page[AcceleratorOut]:
    """Accelerator datasheet facts, ordered by id, with their sources."""
    rows = fetch_accelerators(session, limit=page_size + 1, after_id=decode_token(page_token))
    items = [AcceleratorOut.from_row(row) for row in rows[:page_size]]
    token = encode_token(items[-1].id) if len(rows) > page_size else None
    return Page[AcceleratorOut](items=items, next_page_token=token)


@router.get(
    "/v1/accelerators/{accelerator_id}", tags=["accelerators"], summary="Get an accelerator",
    response_model=AcceleratorOut, status_code=200, responses=problem_responses(404, 422),
)
def get_accelerator(
    session: SessionDep,
    accelerator_id: Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
                                        examples=["h100-sxm5-80gb"])],
) -> AcceleratorOut:
    """One accelerator by id."""
    return AcceleratorOut.from_row(fetch_accelerator(session, accelerator_id))


@router.post(
    "/v1/accelerators", tags=["accelerators"], summary="Add an accelerator",
    response_model=AcceleratorOut, status_code=201,
    responses={201: {"headers": {"Location": {"description": "The accelerator's URL.",
                                              "schema": {"type": "string"}}}},
               **problem_responses(401, 403, 409, 413, 422)},
)
def create_accelerator(
    request: Request, response: Response, session: SessionDep, principal: CatalogWrite,
    body: Annotated[AcceleratorIn, Body(openapi_examples={
        "npu": {"summary": "An in-house NPU", "value": ACCELERATOR_EXAMPLE}})],
) -> AcceleratorOut:
    """An accelerator the catalogue lacks (an in-house or new part). Estimates, plans and
    quotes can use it at once: it has no published runs, so it gets the conservative
    efficiency prior and the widest band, with a warning. Immutable: an id that exists is
    409. Committed before the answer."""
    values: dict[str, Any] = body.model_dump(exclude={"purchase_price_usd"})
    values["purchase_price_usd_micros"] = (
        None if body.purchase_price_usd is None
        else int(Decimal(body.purchase_price_usd) * MICROS))
    row = store_accelerator(session, values)
    answer = AcceleratorOut.from_row(row)
    commit_before_answer(session)
    request.app.state.accelerators.invalidate()
    response.headers["Location"] = f"/v1/accelerators/{row.id}"
    return answer


@router.get(
    "/v1/models", tags=["models"], summary="List model presets",
    response_model=Page[ModelPresetOut], status_code=200, responses=problem_responses(400, 422),
)
async def list_models(
    page_size: PageSize = 50, page_token: PageToken = None
) -> Page[ModelPresetOut]:
    """Published model architectures with parameter counts, ordered by name."""
    after = decode_token(page_token)
    names = [name for name in sorted(PRESETS) if after is None or name > after]
    chosen = names[:page_size]
    token = encode_token(chosen[-1]) if len(names) > page_size else None
    return Page[ModelPresetOut](
        items=[ModelPresetOut.from_preset(PRESETS[n]) for n in chosen], next_page_token=token
    )
