"""Read Bazel's `--execution_log_json_file` (concatenated JSON spawn records), for the
tests and benchmarks that count which actions ran, hit a cache, or were skipped."""

from __future__ import annotations

import json
from pathlib import Path


def read_spawns(path: str | Path, *, missing_ok: bool = False) -> list[dict]:
    p = Path(path)
    if missing_ok and not p.exists():
        return []
    text = p.read_text()
    dec, i, out = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        obj, i = dec.raw_decode(text, i)
        out.append(obj)
