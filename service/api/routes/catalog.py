"""Hardware catalogue and model presets."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from service.api.deps import SessionDep
from service.api.pagination import PageSize, PageToken, decode_token, encode_token
from service.api.problems import problem_responses
from service.api.schemas.catalog import AcceleratorOut, ModelPresetOut
from service.api.schemas.common import Page
from service.catalog.repository import get_accelerator as fetch_accelerator
from service.catalog.repository import list_accelerators as fetch_accelerators
from service.core.presets import PRESETS

router = APIRouter()



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
