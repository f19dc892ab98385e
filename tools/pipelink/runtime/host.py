"""Host providers: a package's Python code that fills its own parameter region (today the
CUtensorMaps its TMA copies read) from the values the caller lends.

The contract's [host] clause names the provider file, the parameters it fills (type
`tmap`), the lent parameters it reads and the facts it needs; pack carries the file, link
copies it into the manifest, and the runtime calls it when a launch is planned or a
session is opened (`Kernel.open`): once per session, so a captured graph replays with no
host work. A provider is

    def provide(lent, facts, host) -> {param: bytes}

`lent` holds the caller's values of `reads` (pointers as ints), `facts` the linked facts it
lists, `host` a `HostEncoder` (or a test double with the same methods).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any, Mapping

from pipelink.common.diagnostics import Diagnostic, Fact, Rejected

TMAP_BYTES = 128


class HostError(Rejected):
    """R-HOST: a provider refused the lent values, failed, or returned a wrong region."""

    def __init__(self, message: str, *, hint: str = "", facts=()):
        super().__init__(Diagnostic("R-HOST", message, facts=list(facts), hint=hint))

    @property
    def code(self) -> str:
        return "R-HOST"


@dataclass(frozen=True)
class HostProvider:
    instance: str
    package: str
    provider: str
    source: str
    fills: tuple[str, ...]
    reads: tuple[str, ...]
    facts: tuple[str, ...]
    package_digest: str = ""  # the package the source came from ("" in manifests linked before the binding)
    source_sha256: str = ""  # sha256 of `source` at link time

    @classmethod
    def from_dict(cls, d: Mapping) -> "HostProvider":
        return cls(str(d["instance"]), str(d["package"]), str(d["provider"]), str(d["source"]),
                   tuple(str(x) for x in d["fills"]), tuple(str(x) for x in d["reads"]),
                   tuple(str(x) for x in d["facts"]), _text(d.get("package_digest", ""), "package_digest"),
                   _text(d.get("source_sha256", ""), "source_sha256"))

    def where(self) -> str:
        return f"host provider {self.provider} of {self.instance} ({self.package})"


@dataclass(frozen=True)
class HostBinding:
    """The manifest's `host_binding`: the sha256 of the cubins its providers were linked with, and one
    digest over those and every provider's package digest and source sha256
    (pipelink.common.host_binding)."""

    cubin_sha256: tuple[str, ...]
    digest: str

    @classmethod
    def from_dict(cls, d: Mapping) -> "HostBinding":
        shas = d["cubin_sha256"]
        if not isinstance(shas, list):
            raise TypeError(f"host_binding.cubin_sha256 must be a JSON array, not {type(shas).__name__}")
        return cls(tuple(_text(s, "host_binding.cubin_sha256 entry") for s in shas), _text(d["digest"], "host_binding.digest"))


def _text(v, what: str) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{what} must be a string, not {type(v).__name__}")
    return v


_COMPILED: dict[str, Any] = {}  # source -> provide function (one exec per distinct source)


def _provide_fn(p: HostProvider):
    fn = _COMPILED.get(p.source)
    if fn is None:
        ns: dict[str, Any] = {"__name__": f"pipelink_host_{p.package}"}
        try:
            exec(compile(p.source, p.provider, "exec"), ns)  # noqa: S102 - the package's own code
            fn = ns["provide"]
        except Exception as e:  # noqa: BLE001 - any failure of foreign code is R-HOST
            raise HostError(f"{p.where()} does not load: {type(e).__name__}: {e}",
                            hint="repack the component; pack checks the provider parses") from None
        _COMPILED[p.source] = fn
    return fn


def run_providers(providers, values: Mapping[str, Any], facts: Mapping[str, int], host) -> dict[str, bytes]:
    """Call every provider; -> {filled param: bytes}. Everything they return is checked."""
    out: dict[str, bytes] = {}
    for p in providers:
        lent = {n: values[n] for n in p.reads}
        got_facts = {n: facts[n] for n in p.facts}
        try:
            region = _provide_fn(p)(lent, got_facts, host)
        except Rejected:
            raise
        except Exception as e:  # noqa: BLE001
            raise HostError(f"{p.where()} failed: {type(e).__name__}: {e}",
                            facts=[Fact("lent", ", ".join(f"{k} = {v}" for k, v in lent.items()))],
                            hint="the provider refused these values; check the sizes and pointers passed") from None
        if not isinstance(region, Mapping) or set(region) != set(p.fills):
            have = sorted(region) if isinstance(region, Mapping) else type(region).__name__
            raise HostError(f"{p.where()} returned {have}, not its region {sorted(p.fills)}",
                            hint="provide() must return {name: bytes} for exactly the contract's fills")
        for name in p.fills:
            v = region[name]
            if not isinstance(v, (bytes, bytearray)) or len(v) != TMAP_BYTES:
                raise HostError(f"{p.where()} returned {type(v).__name__} of {len(v) if hasattr(v, '__len__') else '?'} "
                                f"bytes for {name!r}; a tmap is {TMAP_BYTES} bytes")
            out[name] = bytes(v)
    return out


_DTYPES = {"bf16": ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 2), "f16": ("CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 2),
           "f32": ("CU_TENSOR_MAP_DATA_TYPE_FLOAT32", 4), "u8": ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 1)}
_SWIZZLE = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
            128: "CU_TENSOR_MAP_SWIZZLE_128B"}
_L2_PROMOTION = {0: "CU_TENSOR_MAP_L2_PROMOTION_NONE", 64: "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
                 128: "CU_TENSOR_MAP_L2_PROMOTION_L2_128B", 256: "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"}


class HostEncoder:
    """What providers call: tensor-map encoding through the driver, and checks."""

    def __init__(self, driver=None):
        self._drv = driver

    @staticmethod
    def require(cond: bool, message: str) -> None:
        if not cond:
            raise HostError(message, hint="the kernel does not support these sizes")

    def tensor_map_2d(self, ptr: int, dtype: str, *, rows: int, cols: int, box_rows: int, box_cols: int,
                      swizzle: int = 128, l2_promotion: int = 256) -> bytes:
        """A row-major [rows, cols] tensor at `ptr`, read in boxes of [box_rows, box_cols];
        out-of-bounds elements read as zero. `l2_promotion`: the bytes L2 fetches per miss (0: none)."""
        if (dtype not in _DTYPES or isinstance(swizzle, bool) or swizzle not in _SWIZZLE
                or isinstance(l2_promotion, bool) or l2_promotion not in _L2_PROMOTION):
            raise HostError(f"tensor_map_2d: dtype {dtype!r} / swizzle {swizzle!r} / l2_promotion {l2_promotion!r} "
                            "not supported", hint=f"dtype in {sorted(_DTYPES)}, swizzle in {sorted(_SWIZZLE)}, "
                            f"l2_promotion in {sorted(_L2_PROMOTION)}")
        esize = _DTYPES[dtype][1]
        self.require(rows >= 1 and cols >= 1, f"tensor of {rows} x {cols} is empty")
        self.require(ptr % 16 == 0, f"address {ptr:#x} is not 16-byte aligned (TMA)")
        self.require((cols * esize) % 16 == 0, f"row of {cols} {dtype} ({cols * esize} B) is not a multiple of 16 B (TMA)")
        self.require(rows < 2**32 and cols < 2**32, "tensor dimensions must be below 2^32 (TMA)")
        drv = self._drv
        if drv is None:
            from cuda.bindings import driver as drv  # noqa: PLC0415 - only on a GPU machine
            self._drv = drv
        u64 = drv.cuuint64_t
        u32 = drv.cuuint32_t
        res = drv.cuTensorMapEncodeTiled(
            getattr(drv.CUtensorMapDataType, _DTYPES[dtype][0]), 2, ptr,
            [u64(cols), u64(rows)], [u64(cols * esize)], [u32(box_cols), u32(box_rows)], [u32(1), u32(1)],
            drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, getattr(drv.CUtensorMapSwizzle, _SWIZZLE[swizzle]),
            getattr(drv.CUtensorMapL2promotion, _L2_PROMOTION[l2_promotion]),
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
        if res[0] != drv.CUresult.CUDA_SUCCESS:
            raise HostError(f"cuTensorMapEncodeTiled failed ({res[0].name}) for [{rows}, {cols}] {dtype}, "
                            f"box [{box_rows}, {box_cols}], swizzle {swizzle}",
                            hint="box sizes must be 1..256 and box_cols * element size <= swizzle span")
        tmap = res[1]
        raw = getattr(tmap, "getPtr", None)
        if raw is not None:
            return ctypes.string_at(int(raw()), TMAP_BYTES)
        return bytes(memoryview(tmap))[:TMAP_BYTES]
