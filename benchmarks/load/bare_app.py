"""The baseline: a bare FastAPI app with no middleware, no database and no model.

Every load figure is reported as a ratio against this app served the same way in the same run,
so the noise of a shared 2-core machine cancels out.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

app = FastAPI()


@app.get("/bare")
def bare_get() -> dict[str, bool]:
    return {"ok": True}


@app.post("/bare")
def bare_post(body: dict[str, Any]) -> dict[str, int]:
    return {"fields": len(body)}


@app.get("/bare-async")
async def bare_async_get() -> dict[str, bool]:
    """The issue-16 baseline: an ``async def`` endpoint, no thread-pool hand-off."""
    return {"ok": True}


@app.post("/bare-async")
async def bare_async_post(body: dict[str, Any]) -> dict[str, int]:
    return {"fields": len(body)}
