"""In-process wake-up hints: an event per subscription, set after each commit."""

from __future__ import annotations

import threading
from collections.abc import Collection


class MemorySubscription:
    def __init__(self, owner: MemoryNotifier, queues: frozenset[str]) -> None:
        self.queues = queues
        self._owner = owner
        self._event = threading.Event()

    def hint(self) -> None:
        self._event.set()

    def wait(self, timeout: float) -> bool:
        woken = self._event.wait(timeout)
        self._event.clear()
        return woken

    def close(self) -> None:
        self._owner.unsubscribe(self)


class MemoryNotifier:
    def __init__(self) -> None:
        self._subscriptions: list[MemorySubscription] = []
        self._lock = threading.Lock()

    def listen(self, queues: Collection[str]) -> MemorySubscription:
        subscription = MemorySubscription(self, frozenset(queues))
        with self._lock:
            self._subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: MemorySubscription) -> None:
        with self._lock:
            if subscription in self._subscriptions:
                self._subscriptions.remove(subscription)

    def publish(self, queues: Collection[str]) -> None:
        if not queues:
            return
        with self._lock:
            woken = [s for s in self._subscriptions if not s.queues.isdisjoint(queues)]
        for subscription in woken:
            subscription.hint()
