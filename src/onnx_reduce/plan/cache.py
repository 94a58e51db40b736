"""The one cache of the pipeline's per-shape work: bounded, oldest entry out first.

Prepared calls, layouts, packed geometries and kernel jobs are worked out once per (dtype,
shape, axes) and reused. A process that meets many shapes must not grow without bound, so each
such cache keeps at most ``size`` entries; when full, the entry stored first makes room (a hit
is a plain ``dict`` lookup, ~30 ns; a hit does not reorder, which would cost more on every call
than it saves on the rare miss).

>>> cache = BoundedCache(2)
>>> cache.put("a", 1), cache.put("b", 2), cache.put("c", 3)
(1, 2, 3)
>>> cache.get("a"), cache.get("c"), len(cache)
(None, 3, 2)
"""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

__all__ = ["BoundedCache"]

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``size`` entries; :meth:`get` is ``dict.get``, :meth:`put` evicts the oldest.
    Safe to share between threads (a put under a lock; gets need none)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"a cache holds at least one entry, got size {size}")
        self.size = size
        self._entries: dict[K, V] = {}
        self._lock = threading.Lock()
        self.get = self._entries.get  # bound once: a lookup costs one call

    def put(self, key: K, value: V) -> V:
        """Store ``value`` under ``key`` (the oldest entry out if full) and return it."""
        with self._lock:
            entries = self._entries
            if key not in entries and len(entries) >= self.size:
                del entries[next(iter(entries))]
            entries[key] = value
        return value

    def values(self) -> list[V]:
        return list(self._entries.values())

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
