"""Shared fixtures for the pipelink pytest suite (issue 3).

* `lto`: compiles a `.cu` to LTO-IR with the toolkit pipelink finds, once per session: objects
  are cached under a temporary folder keyed by the hash of the source, the headers it can see,
  the defines and the arch (set PIPELINK_TEST_CACHE=<dir> to keep them across runs).
* `packer`: writes contracts and kernel files from strings and packs them for real through
  `pipelink.linker.package.pack` (also cached by content), and makes contract *variants* of a real
  package for check-level tests (a variant is re-verified against the package's measurement,
  so it is a contract pack would accept for that very object).
* `toy`: the examples/toy packages (producer -> ring -> consumer -> sink).
* `requires_gpu` marker (`requires_gpu(sm=90)`: an sm_90 device): skipped, with the reason, when
  cuInit(0) fails or no device exists (tests/helpers/gpu.py). It is the suite's only GPU gate.
* tests/helpers/: the GPU check, CUTLASS headers, `load_script` (the symbol-link experiment's
  harness loaded by path), the entry points' fakes and the multi-rank GPU workers.
* tests/fuzz/: the bad-input fuzzers (test_fuzz.py runs seeded slices; `python -m fuzz.cli`).

Run: `.venv/bin/python -m pytest tests` (the suite puts tools/ on sys.path itself).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
TESTS = ROOT / "tests"  # `helpers` (tests/helpers/) is imported from here
for _path in (TESTS, TOOLS):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from pipelink.linker.compose import Composition, parse_kernel  # noqa: E402
from pipelink.linker.contract import parse_contract_text  # noqa: E402
from pipelink.common.diagnostics import Diagnostic, Rejected, render_all  # noqa: E402
from pipelink.linker.package import Package, pack, verify  # noqa: E402
from pipelink.linker.package_io import write_package  # noqa: E402
from pipelink.linker.toolkit import find_toolkit  # noqa: E402

# Helpers in tests/helpers/ that tests also import from here (conftest keeps the fixtures and the
# packing/diagnostic helpers, which import pipelink).
from helpers.cutlass import cutlass_include, require_cutlass  # noqa: E402,F401
from pipelink.runtime.device import gpu_unavailable_reason  # noqa: E402,F401

INCLUDE = TOOLS / "pipelink" / "include"
TOY = ROOT / "examples" / "toy"
COMPONENTS = Path(__file__).resolve().parent / "components"


# ---- collection ---------------------------------------------------------------------------

def pytest_ignore_collect(collection_path, config):
    # Bazel's convenience links (bazel-bin, bazel-out, ...) and the nested e2e Bazel workspace
    # hold copies of sources and outputs, not pytest tests.
    if collection_path.name.startswith("bazel-"):
        return True
    return None


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "requires_gpu(sm=None): needs a CUDA GPU and driver (sm=90: an sm_90 one); skipped with "
                   "the reason when none is usable. The suite's one GPU gate: tests check their own other "
                   "needs (torch, built cubins) themselves")


def pytest_collection_modifyitems(config, items):
    for it in items:
        marker = it.get_closest_marker("requires_gpu")
        if marker is None:
            continue
        reason = gpu_unavailable_reason(marker.kwargs.get("sm"))
        if reason:
            it.add_marker(pytest.mark.skip(reason=f"requires a GPU: {reason}"))


# ---- compiling components to LTO-IR ---------------------------------------------------------

class LtoCompiler:
    """`lto(src, defines=[...], arch=...)` -> path of an LTO-IR object, compiled at most once."""

    def __init__(self, cache: Path):
        self.cache = cache
        self.cache.mkdir(parents=True, exist_ok=True)
        self.toolkit = find_toolkit()
        self.compiled: list[tuple[str, tuple[str, ...], str]] = []  # what really ran nvcc (not the cache)

    @staticmethod
    def copts(defines=()) -> list[str]:
        """The compile options a package carries for its control build."""
        return [f"-D{d}" for d in defines]

    def key(self, src: Path, defines, arch: str, includes) -> str:
        h = hashlib.sha256()
        h.update(src.read_bytes())
        for d in (INCLUDE, src.parent, *includes):
            for f in sorted(Path(d).glob("*.h")):
                h.update(f.name.encode() + b"\0" + f.read_bytes())
        h.update(repr((tuple(defines), arch, self.toolkit.version)).encode())
        return h.hexdigest()[:24]

    def __call__(self, src, *, defines=(), arch: str = "sm_90a", includes=()) -> Path:
        src = Path(src).resolve()
        defines = tuple(defines)
        # One folder per (source, defines, arch): the object keeps the source's name (`x.o`),
        # which is the name a package records.
        out = self.cache / f"{src.stem}.{arch}.{self.key(src, defines, arch, includes)}" / f"{src.stem}.o"
        if out.exists():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        num = arch[len("sm_"):]
        tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
        cmd = self.toolkit.nvcc_base() + [
            "-dc", "-std=c++17", "-O3", f"-gencode=arch=compute_{num},code=lto_{num}",
            f"-I{INCLUDE}", f"-I{src.parent}", *[f"-I{i}" for i in includes], *self.copts(defines),
            str(src), "-o", str(tmp)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.fail(f"nvcc failed for {src.name} {defines}:\n{proc.stderr or proc.stdout}", pytrace=False)
        os.replace(tmp, out)
        self.compiled.append((src.name, defines, arch))
        return out


@pytest.fixture(scope="module")
def one_torch_thread():
    """For modules of tiny CPU tensors: torch's intra-op threads only cost there (most on a busy
    machine of few cores). Use with `pytestmark = pytest.mark.usefixtures("one_torch_thread")`."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def lto(tmp_path_factory) -> LtoCompiler:
    cache = os.environ.get("PIPELINK_TEST_CACHE")
    return LtoCompiler(Path(cache) if cache else tmp_path_factory.mktemp("lto-cache"))


# ---- contracts, packages and kernels from strings -------------------------------------------

def _sha(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def _component_name(text: str) -> str:
    m = re.search(r'^\s*name\s*=\s*"(\w+)"', text, re.M)
    return m.group(1) if m else "component"


class Packer:
    def __init__(self, root: Path):
        self.root = root
        self._packs: dict[str, Package] = {}

    def write(self, text: str, filename: str) -> Path:
        """Write text to <root>/<hash>/<filename> (one folder per content: no clobbering)."""
        d = self.root / _sha(text, filename)
        d.mkdir(parents=True, exist_ok=True)
        p = d / filename
        if not p.exists():
            p.write_text(text)
        return p

    def contract_file(self, text: str, name: str | None = None) -> Path:
        return self.write(text, f"{name or _component_name(text)}.contract.toml")

    def pack(self, contract, objects, *, sources=(), copts=()) -> Package:
        """Pack for real (cached by content). `contract` is a path or the contract's text."""
        if isinstance(contract, Path):
            path = contract
        else:
            path = self.contract_file(contract)
        objects = [Path(o) for o in objects]
        key = _sha(path, path.read_text(), *[o.read_bytes() for o in objects], *map(str, sources), *copts)
        if key not in self._packs:
            self._packs[key] = pack(str(path), [str(o) for o in objects], sources=[str(s) for s in sources],
                                    copts=list(copts))
        return self._packs[key]

    def variant(self, pkg: Package, text: str, *, check_object: bool = True) -> Package:
        """`pkg` with another contract (written to a file, so diagnostics point at real lines).

        With check_object (the default) the contract is verified against the package's own
        measurement, as pack would: the variant is a package pack accepts for that object.
        """
        path = self.contract_file(text)
        contract = parse_contract_text(text, str(path))
        if check_object:
            verify(contract, pkg.measured, sorted(pkg.objects))
        return dataclasses.replace(pkg, contract=contract, contract_text=text, path=str(path))

    def save(self, pkg: Package, name: str | None = None) -> Path:
        out = self.root / "packages" / _sha(pkg.digest(), pkg.path) / f"{name or pkg.name}.plpkg"
        if not out.exists():
            write_package(pkg, str(out))
        return out

    def kernel_file(self, text: str, name: str = "k") -> Path:
        return self.write(text, f"{name}.kernel.toml")

    def compose(self, text: str, packages, *, name: str = "k", arch: str | None = None,
                all_packages: bool = False) -> Composition:
        """The kernel of `text` over the packages its instances name (a test hands over a whole
        set, e.g. the toy's; a package no instance uses is L-INSTANCE). all_packages: pass them all."""
        named = set(re.findall(r'^package\s*=\s*"([^"]*)"', text, re.M))
        chosen = list(packages) if all_packages else [p for p in packages if p.name in named]
        return parse_kernel(str(self.kernel_file(text, name)), chosen, arch=arch)


@pytest.fixture(scope="session")
def packer(tmp_path_factory) -> Packer:
    return Packer(tmp_path_factory.mktemp("packer"))


def kernel_text(name: str, *instances: tuple[str, str], arch: str = "sm_90a", extra: str = "") -> str:
    """A kernel file: instances are (instance name, package name)."""
    out = [f'[kernel]\nname = "{name}"\narch = "{arch}"\ngrid = [1, 1, 1]\n']
    for iname, pname in instances:
        out.append(f'[[instance]]\nname = "{iname}"\npackage = "{pname}"\n')
    return "\n".join(out) + extra


# ---- the toy example -------------------------------------------------------------------------

@dataclasses.dataclass
class Toy:
    producer: Package
    consumer: Package
    sink: Package
    objects: dict[str, Path]
    kernel: Path = TOY / "toy.kernel.toml"

    @property
    def packages(self) -> list[Package]:
        return [self.producer, self.consumer, self.sink]

    def contract_text(self, name: str) -> str:
        return (TOY / f"{name}.contract.toml").read_text()

    def sources(self, name: str) -> list[Path]:
        return [TOY / f"{name}.cu", TOY / "params.h"]


@pytest.fixture(scope="session")
def toy(lto, packer) -> Toy:
    objs = {n: lto(TOY / f"{n}.cu") for n in ("producer", "consumer", "sink")}
    pkgs = {n: packer.pack(TOY / f"{n}.contract.toml", [objs[n]], sources=[TOY / f"{n}.cu", TOY / "params.h"])
            for n in objs}
    return Toy(pkgs["producer"], pkgs["consumer"], pkgs["sink"], objs)


@pytest.fixture(scope="session")
def toy_linked(toy):
    """The toy kernel linked once per session, with its single-translation-unit control."""
    from pipelink.linker.link import link

    return link(parse_kernel(str(toy.kernel), toy.packages), control=True)


@pytest.fixture(scope="session")
def component(lto, packer):
    """component(name, defines=(), contract=None) -> a real package of tests/components/<name>.cu."""

    def make(name: str, *, defines=(), contract: str | None = None, source: str | None = None,
             with_sources: bool = True) -> Package:
        src = COMPONENTS / f"{source or name}.cu"
        obj = lto(src, defines=defines)
        text = contract if contract is not None else (COMPONENTS / f"{name}.contract.toml").read_text()
        return packer.pack(text, [obj], sources=[src] if with_sources else (), copts=LtoCompiler.copts(defines))

    return make


# ---- diagnostics -------------------------------------------------------------------------------

def rejected(fn, *args, **kwargs) -> Rejected:
    """Run fn and return the Rejected it raised (fail when it raised nothing)."""
    try:
        fn(*args, **kwargs)
    except Rejected as e:
        return e
    pytest.fail(f"{getattr(fn, '__name__', fn)} was expected to reject its input, and accepted it", pytrace=False)


def diagnostic(rej: Rejected, code: str) -> Diagnostic:
    """The first diagnostic with `code` (fail, showing all of them, when there is none)."""
    for d in rej.diagnostics:
        if d.code == code:
            return d
    pytest.fail(f"expected {code}, got:\n{render_all(rej.diagnostics)}", pytrace=False)


def line_of(path, needle: str) -> str:
    """'path:N' for the first line of `path` containing `needle` (what a Fact origin says)."""
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if needle in line:
            return f"{path}:{n}"
    raise AssertionError(f"{needle!r} not in {path}")


def assert_mentions(diag: Diagnostic, *needles: str) -> None:
    text = diag.render()
    for n in needles:
        assert n in text, f"{n!r} not in the diagnostic:\n{text}"
