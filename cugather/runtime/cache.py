"""Plan caches: bound plans by call key, least recently used dropped first."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict, namedtuple

__all__ = ["PlanCacheInfo", "PlanCache", "clear_all"]

PlanCacheInfo = namedtuple("PlanCacheInfo", "hits misses maxsize currsize")
PlanCacheInfo.__doc__ = "Plan-cache statistics: hits, misses, maxsize, currsize."

_live = weakref.WeakSet()  # every PlanCache, so jit.cache_clear() reaches them all
_live_lock = threading.Lock()


class PlanCache:
    """An LRU of bound plans keyed by call key; a hit moves to the end.

    Lookups take no lock (dict operations are atomic); counters are exact in
    one thread and approximate under contention.
    """

    __slots__ = ("_data", "_lock", "maxsize", "hits", "misses", "__weakref__")

    def __init__(self, maxsize: int):
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.maxsize = maxsize
        self.hits = self.misses = 0
        with _live_lock:
            _live.add(self)

    def get(self, key):
        bound = self._data.get(key)
        if bound is not None:
            self.hits += 1
            try:
                self._data.move_to_end(key)
            except KeyError:  # dropped by another thread meanwhile
                pass
        return bound

    def put(self, key, bound) -> None:
        with self._lock:
            self.misses += 1
            self._data[key] = bound
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def info(self) -> PlanCacheInfo:
        with self._lock:
            return PlanCacheInfo(self.hits, self.misses, self.maxsize, len(self._data))

    def clear(self) -> int:
        """Drop every plan and reset the counters; return how many were dropped."""
        with self._lock:
            n = len(self._data)
            self._data.clear()
            self.hits = self.misses = 0
            return n


def clear_all() -> int:
    """Empty every plan cache of the process; return how many plans were dropped."""
    with _live_lock:
        caches = list(_live)
    return sum(c.clear() for c in caches)
