"""Host-provider code is code: the checks `Kernel` makes before any provider of a manifest can run.

A manifest carries each host provider's Python source, and planning a launch executes it. So a
cubin + manifest from a remote cache, a colleague or a download would run someone's Python on
this host. Before anything runs, `check_host_code`:

1. binds the code (always): every provider's source must have the sha256 the link recorded,
   the manifest's `host_binding` digest must match (the cubins' sha256, the package digests,
   the sources' sha256), and the cubin must be the one it was linked with (or, by name
   <stem>.control.cubin, the control beside that cubin). R-HOST otherwise.
2. trusts the code only from the caller's own build (like Hugging Face's `trust_remote_code`):
   every provider's source is byte-identical to a file of the same name in the workspace whose
   runtime this is (the checkout holding tools/pipelink; the checked-in providers, e.g.
   kernels/gemm/tma_loader_host.py), or the caller opted in: `trust_host_code=True`, a set of
   binding digests (`trust_host_code={"<digest>"}`), or $PIPELINK_TRUST_HOST_CODE ("1" for all,
   else binding digests separated by commas). R-HOST otherwise, with the flag and the digest.

Only manifests with host providers are concerned; a kernel without [host] runs no Python.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from pipelink.common.diagnostics import Fact
from pipelink.common.host_binding import binding_digest, sha256_hex, source_sha256
from pipelink.runtime.host import HostError, HostProvider
from pipelink.runtime.launch_error import LaunchError
from pipelink.runtime.manifest import Manifest

TRUST_ENV = "PIPELINK_TRUST_HOST_CODE"
# The workspace this runtime belongs to: <root>/tools/pipelink/runtime/host_trust.py.
WORKSPACE = Path(__file__).resolve().parents[3]

TrustHostCode = bool | Iterable[str]


def check_host_code(m: Manifest, cubin: bytes, *, trust_host_code: TrustHostCode = False,
                    cubin_path: str | Path | None = None) -> None:
    """R-HOST unless the manifest's providers are bound to it and this cubin, and trusted. Runs no
    provider code."""
    digests = trusted_digests(trust_host_code)
    if not m.host:
        return
    verify_binding(m, cubin, cubin_path)
    if digests is True or (m.host_binding is not None and m.host_binding.digest in digests):
        return
    foreign = [p for p in m.host if not in_workspace(p)]
    if foreign:
        p, digest = foreign[0], m.host_binding.digest if m.host_binding else ""
        raise HostError(
            f"{p.where()} is Python from outside this workspace (no {p.provider} here has its sha256 "
            f"{p.source_sha256}); loading the kernel would run it on this host",
            facts=[Fact(f"manifest {m.source}", f"host_binding.digest = {digest}")],
            hint=f"if you trust whoever built this kernel: Kernel.load(..., trust_host_code=True), or trust this "
                 f"build only with trust_host_code={{'{digest}'}} or {TRUST_ENV}={digest} ({TRUST_ENV}=1 trusts all)")


def verify_binding(m: Manifest, cubin: bytes, cubin_path: str | Path | None = None) -> None:
    """The providers' source is what the link recorded, and the manifest belongs to this cubin."""
    relink = "relink: `pipelink link` (or the Bazel rule) writes the manifest beside its cubin"
    b = m.host_binding
    unbound = [p for p in m.host if not p.source_sha256 or not p.package_digest]
    if b is None or unbound:
        raise HostError(f"manifest {m.source} carries host provider code without its binding "
                        f"(host_binding, source_sha256, package_digest): linked by an older pipelink, or edited",
                        hint=relink)
    for p in m.host:
        have = source_sha256(p.source)
        if have != p.source_sha256:
            raise HostError(f"the source of {p.where()} was edited after linking: its sha256 is {have}, the link "
                            f"recorded {p.source_sha256}", hint=relink + "; never edit a provider inside a manifest")
    want = binding_digest(b.cubin_sha256, [binding_entry(p) for p in m.host])
    if want != b.digest:
        raise HostError(f"manifest {m.source}: host_binding.digest {b.digest} does not match its providers and "
                        f"cubins ({want}): the manifest was edited after linking", hint=relink)
    sha = sha256_hex(cubin)
    if sha not in b.cubin_sha256 and not _control_beside_bound_cubin(b.cubin_sha256, cubin_path):
        raise HostError(f"manifest {m.source} belongs to another cubin: its host providers were linked with cubin "
                        f"sha256 {' or '.join(b.cubin_sha256)}, this one is {sha}",
                        hint="keep the cubin and its manifest from one link (a control cubin beside its linked cubin)")


def binding_entry(p: HostProvider) -> tuple[str, str, str, str, str]:
    return (p.instance, p.package, p.package_digest, p.provider, p.source_sha256)


def _control_beside_bound_cubin(bound: tuple[str, ...], cubin_path: str | Path | None) -> bool:
    """A Bazel control cubin comes from its own action, after the manifest: it is accepted as
    <stem>.control.cubin when <stem>.cubin beside it is the cubin the manifest is bound to."""
    if cubin_path is None or not str(cubin_path).endswith(".control.cubin"):
        return False
    linked = Path(str(cubin_path)[: -len(".control.cubin")] + ".cubin")
    try:
        return sha256_hex(linked.read_bytes()) in bound
    except OSError:
        return False


def trusted_digests(trust_host_code: TrustHostCode) -> bool | frozenset[str]:
    """True (trust every provider), or the binding digests trusted by the argument and $PIPELINK_TRUST_HOST_CODE."""
    env = os.environ.get(TRUST_ENV, "").strip()
    if trust_host_code is True or env.lower() in ("1", "true", "yes"):
        return True
    if trust_host_code is False or trust_host_code is None:
        given = frozenset()
    elif isinstance(trust_host_code, str):
        given = frozenset([trust_host_code])
    else:
        items = list(trust_host_code) if isinstance(trust_host_code, Iterable) else [trust_host_code]
        if not all(isinstance(d, str) for d in items):
            raise LaunchError("R-PARAM", f"trust_host_code must be a bool or binding digests (str), not "
                              f"{type(trust_host_code).__name__} {trust_host_code!r}"[:300],
                              hint="trust_host_code=True, or trust_host_code={'<host_binding.digest>'}")
        given = frozenset(items)
    return given | frozenset(d.strip() for d in env.split(",") if d.strip() and d.strip() != "0")


_WORKSPACE_FILES: dict[str, tuple[Path, ...]] | None = None  # file name -> the workspace's files of that name


def in_workspace(p: HostProvider) -> bool:
    """Is the provider's source byte-identical to a file of its name in this runtime's workspace?"""
    global _WORKSPACE_FILES
    if _WORKSPACE_FILES is None:
        _WORKSPACE_FILES = workspace_python_files(WORKSPACE)
    want = source_sha256(p.source)
    for path in _WORKSPACE_FILES.get(p.provider, ()):
        try:
            if sha256_hex(path.read_bytes()) == want:
                return True
        except OSError:
            continue
    return False


def workspace_python_files(root: Path) -> dict[str, tuple[Path, ...]]:
    """{file name: its paths} of the .py files under `root`, when it is a workspace (has
    MODULE.bazel). Bazel's output links (bazel-*), hidden folders (.git, .venv) and symlinked
    folders are not walked: what they hold is built, fetched or installed, not checked in."""
    if not (root / "MODULE.bazel").is_file():
        return {}
    found: dict[str, list[Path]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "bazel-")) and d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                found.setdefault(name, []).append(Path(folder, name))
    return {k: tuple(v) for k, v in found.items()}
