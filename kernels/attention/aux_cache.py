"""The attention entries' cache of small device aux buffers (windows, softcaps, slopes,
document schedules): bounded, least recently used out, but never one a CUDA graph captured."""

from __future__ import annotations

import threading
from collections import OrderedDict


class AuxCache:
    """Device aux buffers by key, least recently used out first: a loop that passes new doc_ids
    (or windows) every step must not keep every step's tensors alive. A buffer fetched while the
    current stream is capturing a CUDA graph is kept for the process's life: the graph reads its
    address at every replay."""

    def __init__(self, limit: int):
        self.limit, self.items, self.pinned, self.lock = limit, OrderedDict(), set(), threading.Lock()

    def get(self, key):
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
                self._pin(key)
            return value

    def put(self, key, value):
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            self._pin(key)
            for old in [k for k in self.items if k not in self.pinned][: max(0, len(self.items) - self.limit)]:
                del self.items[old]
            return value

    def _pin(self, key):
        try:
            import torch
            capturing = torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
        except Exception:  # noqa: BLE001 - no CUDA: nothing can be capturing
            capturing = False
        if capturing:
            self.pinned.add(key)

    def clear(self):
        with self.lock:
            self.items.clear()
            self.pinned.clear()

    def __len__(self):
        return len(self.items)
