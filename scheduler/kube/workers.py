"""A keyed worker pool for the binder: calls run in parallel, calls with the same key one at a time in order.

The binder keys every call by the object it changes (a pod's ``namespace/name``, a Queue, a PodGroup), so
a pod's eviction of one record and its bind of a later one never overtake each other, while unrelated pods
are bound side by side. A slow key (a GPU-sharing bind waiting for its reservation pod) holds one worker and
its own key only; the other workers go on with other keys.

Calls also carry a *lane* (the binder uses the record's offset and the job): free workers take ready calls from
the lanes in turn, so one job's bind is not queued behind the hundreds of calls of a large job submitted before it
(a 500-pod gang, or a burst of pending-pod conditions); within a lane, calls start in submission order.

With one worker nothing runs on a thread: :meth:`KeyedPool.submit` runs the call at once in the caller, so a
single-worker binder is exactly the sequential binder.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from typing import TypeAlias

__all__ = ["KeyedPool", "Lane"]

Lane: TypeAlias = Hashable  # any hashable name: calls of one lane start in order, lanes take turns


class KeyedPool:
    """``workers`` threads running submitted calls; calls with the same key run in submission order."""

    def __init__(self, workers: int, name: str = "binder") -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.workers = workers
        self._cv = threading.Condition()
        self._queues: dict[str, deque[tuple[Lane, Callable[[], None]]]] = {}  # key -> its calls (lane, call)
        self._ready: dict[Lane, deque[str]] = {}  # lane -> keys whose next call is in that lane, none running
        self._turns: deque[Lane] = deque()  # lanes with a ready key, in the order they get the next worker
        self._busy = 0  # calls submitted and not finished
        self._closed = False
        self._threads = (
            [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True) for i in range(workers)]
            if workers > 1
            else []
        )
        for t in self._threads:
            t.start()

    def submit(self, key: str, fn: Callable[[], None], lane: Lane = 0) -> None:
        """Run ``fn`` after every call submitted earlier with ``key``; ``fn`` must not raise. Ready calls of
        different lanes take turns for the workers."""
        if not self._threads:
            fn()
            return
        with self._cv:
            if self._closed:
                raise RuntimeError("the pool is closed")
            self._busy += 1
            q = self._queues.get(key)
            if q is None:
                self._queues[key] = deque([(lane, fn)])
                self._make_ready(key, lane)
                self._cv.notify_all()
            else:
                q.append((lane, fn))  # the key is running or already ready: its worker takes this next

    def _make_ready(self, key: str, lane: Lane) -> None:
        ready = self._ready.get(lane)
        if ready is None:
            ready = self._ready[lane] = deque()
            self._turns.append(lane)
        ready.append(key)

    def _next_key(self) -> str:
        """The next ready key, from the lane whose turn it is (that lane then goes to the back)."""
        lane = self._turns.popleft()
        ready = self._ready[lane]
        key = ready.popleft()
        if ready:
            self._turns.append(lane)
        else:
            del self._ready[lane]
        return key

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
                while not self._turns and not self._closed:
                    self._cv.wait()
                if not self._turns:
                    return
                key = self._next_key()
                fn = self._queues[key][0][1]
            try:
                fn()
            finally:
                with self._cv:
                    q = self._queues[key]
                    q.popleft()
                    if q:
                        self._make_ready(key, q[0][0])
                    else:
                        del self._queues[key]
                    self._busy -= 1
                    self._cv.notify_all()
