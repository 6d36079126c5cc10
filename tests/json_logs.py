"""A capture of what a logger writes, as the JSON objects the service's formatter makes."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from service.api.observability import JsonFormatter


class _Keep(logging.Handler):
    def __init__(self, lines: list[dict[str, Any]]) -> None:
        super().__init__()
        self.lines = lines
        self.setFormatter(JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@contextmanager
def json_lines(logger: logging.Logger) -> Iterator[list[dict[str, Any]]]:
    """Every line ``logger`` writes inside the block, parsed (a plain-text line would fail)."""
    lines: list[dict[str, Any]] = []
    keep = _Keep(lines)
    logger.addHandler(keep)
    try:
        yield lines
    finally:
        logger.removeHandler(keep)
