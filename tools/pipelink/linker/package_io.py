"""A package as a file: writing it (a zip with fixed timestamps and sorted entries, so the same
inputs give the same bytes), and reading it back, where every way a .plpkg can be damaged is
P-PACKAGE.

A package is data from elsewhere (another team's build, a cache, a download), so reading it
trusts nothing: the zip layer (unsupported compression, the encrypted flag, a corrupt deflate
stream, bad CRCs, absurd sizes), the manifest's JSON types, and the measurement. Then the
contract is re-verified against the measurement, exactly as `pack` did, so a package whose
contract pack would reject (an edited contract.toml, a handle whose clause is missing, an
unknown handle kind) cannot reach the linker.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile

from pipelink.common.diagnostics import Fact, Rejected, reject
from pipelink.common.files import MAX_TEXT_BYTES, display, read_bytes, read_regular
from pipelink.linker.contract import ARCHES, parse_contract_text
from pipelink.linker.outputs import write_all
from pipelink.linker.package import FORMAT, Package, check_provider_source, retarget, verify
from pipelink.linker.trial import Measured

MAX_ENTRY_BYTES = 512 << 20  # a package entry larger than this is damage (or a zip bomb), not an object
HANDLE_KINDS = ("smem", "smem_at", "bar", "bar_sync", "bar_arrive", "fact", "ring_depth", "ring_buffer", "ring_full", "ring_empty", "role", "export", "call", "ws")
# \Z, not $: `$` also matches before a final newline, so "acc\n" would pass as an identifier.
_IDENT = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]*\Z")
_SAFE_NAME = re.compile(r"\A[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*\Z")
_TOOLKIT = re.compile(r"\A\d+\.\d+\Z")
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


class _Damaged(Exception):
    pass


def _need(cond: bool, why: str) -> None:
    if not cond:
        raise _Damaged(why)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _safe_rel(name) -> bool:
    return isinstance(name, str) and bool(_SAFE_NAME.match(name)) and ".." not in name.split("/")


def _read(z: zipfile.ZipFile, name: str, limit: int = MAX_ENTRY_BYTES) -> bytes:
    try:
        info = z.getinfo(name)
    except KeyError:
        raise _Damaged(f"no {name}") from None
    _need(info.file_size <= limit, f"{name} claims {info.file_size} bytes (at most {limit})")
    try:
        return z.read(info)
    # The zip layer reports damage in many ways: BadZipFile (CRC, headers), NotImplementedError
    # (compression method), RuntimeError (encrypted), zlib.error / EOFError (deflate stream),
    # OSError / ValueError / struct.error (offsets). All mean the same thing here.
    except Exception as e:  # noqa: BLE001
        raise _Damaged(f"{name}: {e.__class__.__name__}: {e}") from None


def _measured(ms, name: str):
    _need(isinstance(ms, dict), "measured is not a table")
    handles = ms.get("handles")
    _need(isinstance(handles, list) and all(isinstance(h, str) for h in handles), "measured.handles is not a list of names")
    for h in handles:
        kind, sep, rest = h[len(f"pl_{name}__"):].partition("__") if h.startswith(f"pl_{name}__") else ("", "", "")
        _need(bool(sep) and bool(_IDENT.match(rest)), f"handle {h!r} is not a pl_{name}__<kind>__<name> symbol")
        _need(kind in HANDLE_KINDS, f"handle {h!r} has an unknown kind {kind!r}")
    _need(len(set(handles)) == len(handles), "measured.handles repeats a handle")
    own = ms.get("own_facts")
    _need(isinstance(own, dict) and all(isinstance(k, str) and _is_int(v) and -2**31 <= v < 2**64 for k, v in own.items()),
          "measured.own_facts is not a table of fact values (i32, u32, u64 or bool)")
    static = ms.get("static_smem")
    _need(_is_int(static) and 0 <= static <= 1 << 20, "measured.static_smem is not a byte count")
    regs = ms.get("regs")
    _need(isinstance(regs, dict) and all(isinstance(k, str) and _is_int(v) and 0 <= v <= 255 for k, v in regs.items()),
          "measured.regs is not a table of register counts")
    return handles, own, static, regs, Measured


def package_digests(manifest: dict, contract: bytes, objects: dict[str, bytes], sources: dict[str, bytes],
                    host: dict[str, bytes] | None = None) -> dict:
    """sha256 of every part of a package: the manifest (less its digests), contract.toml, each
    object and source. Written by pack, checked on read: any edit after packing is damage."""
    sha = lambda b: hashlib.sha256(b).hexdigest()  # noqa: E731
    rest = {k: v for k, v in manifest.items() if k != "digests"}
    out = {"manifest": sha(json.dumps(rest, sort_keys=True).encode()), "contract.toml": sha(contract)}
    out.update({f"objects/{k}": sha(v) for k, v in sorted(objects.items())})
    out.update({f"sources/{k}": sha(v) for k, v in sorted(sources.items())})
    out.update({f"host/{k}": sha(v) for k, v in sorted((host or {}).items())})
    return out


def _check_digests(manifest: dict, contract: bytes, objects: dict[str, bytes], sources: dict[str, bytes],
                   host: dict[str, bytes]) -> None:
    """Packages written before digests were recorded have none; recorded ones must all match."""
    digests = manifest.get("digests")
    if digests is None:
        # Provider code is bound to the package digest (the manifest records it per provider), so
        # a package carrying Python must let that digest be checked against the bytes it holds.
        _need(not host, "it carries host provider code but records no digests")
        return
    _need(isinstance(digests, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in digests.items()),
          "digests is not a table of sha256 strings")
    want = package_digests(manifest, contract, objects, sources, host)
    for part, sha in want.items():
        _need(digests.get(part) == sha, f"{part} does not match its recorded sha256 (edited or damaged after packing)")
    _need(set(digests) == set(want), "digests name parts the package does not have")


def write_package(pkg: Package, out: str, *, inputs: list[str] = ()) -> None:
    manifest = {
        "format": FORMAT,
        "name": pkg.name,
        "arch": pkg.contract.arch,  # may differ from the contract text's (pack --arch)
        "contract_file": pkg.contract.file,
        "toolkit": pkg.measured.toolkit,
        "measured": {
            "handles": list(pkg.measured.handles),
            "own_facts": dict(sorted(pkg.measured.own_facts.items())),
            "static_smem": pkg.measured.static_smem,
            "regs": dict(sorted(pkg.measured.regs.items())),
        },
        "objects": sorted(pkg.objects),
        "sources": sorted(pkg.sources),
        "copts": list(pkg.copts),
        "host": sorted(pkg.host),
    }
    # read_package checks them: an edited contract or manifest, or a damaged object, is P-PACKAGE
    manifest["digests"] = package_digests(manifest, pkg.contract_text.encode(), pkg.objects, pkg.sources, pkg.host)
    entries = {"pipelink-package.json": json.dumps(manifest, indent=2, sort_keys=True).encode(),
               "contract.toml": pkg.contract_text.encode()}
    entries.update({f"objects/{k}": v for k, v in pkg.objects.items()})
    entries.update({f"sources/{k}": v for k, v in pkg.sources.items()})
    entries.update({f"host/{k}": v for k, v in pkg.host.items()})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, _ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, entries[name])
    write_all([(out, buf.getvalue())], flags=["--out"], inputs=list(inputs))


def read_package(path: str) -> Package:
    """Read and re-verify a package: every damage is P-PACKAGE."""
    shown = display(path)
    try:
        # Read whole, as a regular file: a FIFO or a device given as a package would block or
        # never end inside zipfile.
        data = read_regular(path)
    except FileNotFoundError:
        raise reject("E-FILE", f"{shown}: no such package", hint="pack the component first: pipelink pack") from None
    except (OSError, ValueError) as e:
        read_bytes(path, "package", hint="check the --package path")  # the same E-FILE wording as every other input
        raise reject("E-FILE", f"{shown}: cannot read ({e.__class__.__name__})", hint="check the --package path") from None
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except Exception:  # noqa: BLE001 - any parse failure of a foreign file means "not a package"
        raise reject("P-PACKAGE", f"{shown}: not a pipelink package (not a zip file)",
                     hint="re-create it with pipelink pack") from None
    try:
        with z:
            raw = _read(z, "pipelink-package.json", MAX_TEXT_BYTES)
            try:
                manifest = json.loads(raw)
            except (ValueError, RecursionError) as e:
                raise _Damaged(f"pipelink-package.json is not JSON ({e.__class__.__name__})") from None
            _need(isinstance(manifest, dict), "pipelink-package.json is not a table")
            if manifest.get("format") != FORMAT:
                fmt = manifest.get("format")
                raise reject("P-PACKAGE", f"{shown}: package format {fmt!r} is not {FORMAT}",
                             hint="re-pack with this version of pipelink")
            try:
                text = _read(z, "contract.toml", MAX_TEXT_BYTES).decode("utf-8")
            except UnicodeDecodeError:
                raise _Damaged("contract.toml is not UTF-8") from None
            name = manifest.get("name")
            _need(isinstance(name, str), "name is not a string")
            arch = manifest.get("arch")
            _need(arch is None or (isinstance(arch, str) and arch in ARCHES), f"arch {arch!r} is not a known architecture")
            toolkit = manifest.get("toolkit")
            _need(isinstance(toolkit, str) and bool(_TOOLKIT.match(toolkit)), f"toolkit {toolkit!r} is not a version")
            contract_file = manifest.get("contract_file")
            _need(isinstance(contract_file, str) and "\0" not in contract_file, "contract_file is not a path")
            obj_names, src_names, copts = manifest.get("objects"), manifest.get("sources"), manifest.get("copts")
            _need(isinstance(obj_names, list) and obj_names and all(_safe_rel(k) and "/" not in k for k in obj_names),
                  "objects is not a list of file names")
            _need(isinstance(src_names, list) and all(_safe_rel(k) for k in src_names), "sources is not a list of relative paths")
            _need(isinstance(copts, list) and all(isinstance(c, str) and "\0" not in c for c in copts), "copts is not a list of strings")
            _need(len(set(obj_names)) == len(obj_names) and len(set(src_names)) == len(src_names), "an entry is listed twice")
            handles, own, static, regs, Measured = _measured(manifest.get("measured"), name)
            objects = {k: _read(z, f"objects/{k}") for k in obj_names}
            sources = {k: _read(z, f"sources/{k}") for k in src_names}
            host_names = manifest.get("host", [])
            _need(isinstance(host_names, list) and all(_safe_rel(k) and "/" not in k for k in host_names),
                  "host is not a list of file names")
            host = {k: _read(z, f"host/{k}") for k in host_names}
            _check_digests(manifest, text.encode(), objects, sources, host)
    except _Damaged as e:
        raise reject("P-PACKAGE", f"{shown}: damaged package ({e})", hint="re-create it with pipelink pack") from None
    measured = Measured(tuple(handles), dict(own), static, dict(regs), toolkit)
    try:
        contract = retarget(parse_contract_text(text, contract_file), arch)
        if contract.name != name:
            raise reject("P-PACKAGE", f"the manifest names {name!r}, the contract {contract.name!r}", hint="re-pack it")
        # Re-verify: a package is only as good as its contract's match with the measured object.
        verify(contract, measured, sorted(objects))
        # verify sees missing definitions only as externs of the trial link; on read, the
        # measurement's registers name every symbol the trial measured as defined.
        want = {contract.host.provider} if contract.host else set()
        if set(host) != want or not all(check_provider_source(v) for v in host.values()):
            raise reject("P-HOST", f"host provider files {sorted(host)} do not match the contract's [host] "
                         f"{sorted(want)}", hint="re-pack with the contract's provider file")
        unmeasured = sorted(set(contract.defined_symbols()) - set(measured.regs))
        if unmeasured:
            raise reject("P-ENTRY", f"the contract names {', '.join(unmeasured)}, which the object was not measured to define",
                         facts=[Fact("measured", "defines " + (", ".join(sorted(measured.regs)) or "nothing"))],
                         hint="the entry, imports and callable exports must be the ones the object was packed with")
    except Rejected as e:
        raise reject("P-PACKAGE", f"{shown}: damaged package: its contract does not match its measurement "
                     f"({', '.join(dict.fromkeys(e.codes))})",
                     facts=[Fact(f"{d.code}", d.message, next((f.origin for f in d.facts if f.origin), ""))
                            for d in e.diagnostics][:20],
                     hint="re-create it with pipelink pack (was contract.toml or the manifest edited?)") from None
    return Package(contract, text, measured, objects, sources, tuple(copts), path, host)
