"""A keyed worker pool for the binder: calls run in parallel, calls with the same key one at a time in order.

The binder keys every call by the object it changes (a pod's ``namespace/name``, a Queue, a PodGroup), so
a pod's eviction of one record and its bind of a later one never overtake each other, while unrelated pods
are bound side by side. A slow key (a GPU-sharing bind waiting for its reservation pod) holds one worker and
its own key only; the other workers go on with other keys.

With one worker nothing runs on a thread: :meth:`KeyedPool.submit` runs the call at once in the caller, so a
single-worker binder is exactly the sequential binder.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

__all__ = ["KeyedPool"]


class KeyedPool:
    """``workers`` threads running submitted calls; calls with the same key run in submission order."""

    def __init__(self, workers: int, name: str = "binder") -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers
        self._cv = threading.Condition()
        self._queues: dict[str, deque[Callable[[], None]]] = {}  # key -> its calls not yet finished
        self._ready: deque[str] = deque()  # keys with a call to start and none running
        self._busy = 0  # calls submitted and not finished
        self._closed = False
        self._threads = (
            [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
            if workers > 1
            else []
        )
        for t in self._threads:
            t.start()

    def submit(self, key: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` after every call submitted earlier with ``key``; ``fn`` must not raise."""
        if not self._threads:
            fn()
            return
        with self._cv:
            if self._closed:
                raise RuntimeError("the pool is closed")
            self._busy += 1
            q = self._queues.get(key)
            if q is None:
                self._queues[key] = deque([fn])
                self._ready.append(key)
                self._cv.notify_all()
            else:
                q.append(fn)  # the key is running or already ready: its worker takes this next

    def drain(self) -> None:
        """Wait until every submitted call has finished."""
        with self._cv:
            while self._busy:
                self._cv.wait()

    def close(self) -> None:
        """Finish the submitted calls, then stop the threads."""
        self.drain()
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        for t in self._threads:
            t.join()

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._ready and not self._closed:
                    self._cv.wait()
                if not self._ready:
                    return
                key = self._ready.popleft()
                fn = self._queues[key][0]
            try:
                fn()
            finally:
                with self._cv:
                    q = self._queues[key]
                    q.popleft()
                    if q:
                        self._ready.append(key)
                    else:
                        del self._queues[key]
                    self._busy -= 1
                    self._cv.notify_all()
