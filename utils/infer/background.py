"""Iterating on a thread of its own: the items of an iterator made ahead of the caller, a bounded number at a time."""

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")


def in_background(items: Iterator[T], depth: int, name: str = "background") -> Iterator[T]:
    """items, taken by a thread of its own up to depth ahead of the caller (worth it where making an item lets go of
    the GIL: OpenCV decoding and resizing); its exception is raised here, and it stops when the caller does."""
    made, stop = queue.Queue(depth), threading.Event()

    def put(entry) -> bool:
        while not stop.is_set():  # a caller that stopped takes nothing more: the thread ends instead of waiting
            try:
                made.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def make() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put(None)
        except BaseException as e:  # handed to the caller, which raises it
            put((None, e))

    threading.Thread(target=make, name=name, daemon=True).start()
    try:
        while (entry := made.get()) is not None:
            if entry[1] is not None:
                raise entry[1]
            yield entry[0]
    finally:
        stop.set()
