"""The ``calibration_id`` field that estimates, plans and quotes take (issue 37), kept apart
so that ``schemas/estimate.py`` needs no import of the calibration bodies (which hold
estimate requests)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

CALIBRATION_ID_PATTERN = r"^cal_[0-9a-f]{32}$"
CALIBRATION_ID_DESCRIPTION = (
    "A stored calibration (POST /v1/calibrations) the key may read: its factors and band "
    "apply on top of the project's fit, and the answer names its id and revision in "
    "assumptions. Unknown, or another team's: 422 naming calibration_id. Null or absent: "
    "the project's fit alone.")


def _absent(value: Any) -> bool:
    return value is None


CalibrationIdField = Annotated[str | None, Field(
    default=None, pattern=CALIBRATION_ID_PATTERN, description=CALIBRATION_ID_DESCRIPTION,
    examples=["cal_" + "0" * 32], exclude_if=_absent)]
"""Left out of a dump when absent, so that a request without it hashes and stores exactly
as before the field existed (stored quotes' request hashes and canonical requests)."""
