"""The manifest's host binding: what ties each host provider's Python source to the package it came
from and to the cubin it was linked with. The linker writes it (pipelink.linker.link.make_manifest);
the runtime recomputes it before any provider code runs (pipelink.runtime.host_trust).

A provider entry records `source_sha256` (of its source's UTF-8 bytes, the bytes pack read and
the package digest covers) and `package_digest`; the manifest's `host_binding` records the
cubins' sha256 (the linked one, and the control when the same link built it) and `digest`, one
sha256 over all of it. The binding is integrity, not authenticity: anyone can recompute it, so
it catches an edited provider or a mispaired cubin, and names one exact build for a trust
decision; it does not prove who built it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable, Sequence


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source_sha256(source: str) -> str:
    """sha256 of a provider's source as the manifest carries it (a str: its UTF-8 bytes, which are
    the provider file's bytes as packed)."""
    return sha256_hex(source.encode("utf-8"))


def binding_digest(cubin_sha256s: Sequence[str], providers: Iterable[Sequence[str]]) -> str:
    """One sha256 over the cubins' sha256 and each provider's (instance, package, package digest,
    provider file, source sha256), in manifest order."""
    body = {"cubins": list(cubin_sha256s), "providers": [list(p) for p in providers]}
    return sha256_hex(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
