"""A minimal runtime Manifest for launch tests: params laid out like the linker does (natural
alignment), optional lent workspaces each with its pointer param after them."""

from __future__ import annotations

from pipelink.runtime import Manifest


def manifest(params, workspaces=()):
    fields, off = [], 0
    for n, t in params:
        size = 8 if t in ("ptr", "u64") else 4
        off = (off + size - 1) // size * size
        fields.append({"instance": "a", "name": n, "type": t, "offset": off})
        off += size
    for w in workspaces:
        off = (off + 7) // 8 * 8
        fields.append({"instance": "a", "name": w["param"], "type": "ptr", "offset": off})
        off += 8
    return Manifest.from_dict({"format": 1, "kernel": "k", "block": [32, 1, 1], "grid": ["1", "1", "1"],
                               "params": {"size": (off + 7) // 8 * 8, "by_name": {f["name"]: f["type"] for f in fields},
                                          "fields": fields},
                               "workspaces": list(workspaces)})
