"""A small in-process cache of serialised list pages of immutable catalogue versions.

A catalogue version never changes once written (docs/decisions.md 11), so a page of offers is
a pure function of (version id, filters, page size, page token): caching it can never serve a
stale answer. Which version is current is held in memory only while no writer has changed the
catalogue state (service/catalog/changes.py), so a new version is visible as soon as its
commit is. Least recently used pages are evicted past ``max_entries``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class PageCache(Generic[V]):
    """Least-recently-used values of pure functions of immutable catalogue versions (list
    pages as bytes; a quote's offers as ``PriceOffer`` lists)."""

    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._pages: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> V | None:
        """The cached value, or None (a miss is counted by ``get_or_build``)."""
        with self._lock:
            page = self._pages.get(key)
            if page is not None:
                self._pages.move_to_end(key)
                self.hits += 1
            return page

    def get_or_build(self, key: Hashable, build: Callable[[], V]) -> V:
        page = self.get(key)
        if page is not None:
            return page
        with self._lock:
            self.misses += 1
        page = build()  # outside the lock: two racing builders make the same value
        with self._lock:
            self._pages[key] = page
            self._pages.move_to_end(key)
            while len(self._pages) > self.max_entries:
                self._pages.popitem(last=False)
        return page
