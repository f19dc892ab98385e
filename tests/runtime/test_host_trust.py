"""Host-provider code is code (runtime/host_trust.py): before any provider's Python runs, Kernel
checks that its source is bound to its package and to this cubin, and that it is this workspace's
own code or the caller opted in (trust_host_code / $PIPELINK_TRUST_HOST_CODE). All refusals are
R-HOST, on CPU, before the driver is touched; a provider that writes a marker file shows that
nothing ran."""

import copy
import json
import zipfile
from pathlib import Path

import pytest

from pipelink.common.diagnostics import Rejected
from pipelink.common.host_binding import binding_digest, sha256_hex, source_sha256
from pipelink.runtime import Kernel, Manifest, plan_launch
from pipelink.runtime.host_trust import TRUST_ENV, check_host_code, verify_binding

ROOT = Path(__file__).resolve().parents[2]
CUBIN = b"\x7fELF linked cubin"


def marker_source(marker: Path) -> str:
    return ("from pathlib import Path\n"
            f"Path({str(marker)!r}).write_text('ran')\n"  # at exec: even loading the provider would show
            "def provide(lent, facts, host):\n"
            f"    Path({str(marker)!r}).write_text('ran')\n"
            "    return {'tmap_x': bytes(128)}\n")


def manifest_dict(source: str, cubin: bytes = CUBIN, provider: str = "marker_host.py") -> dict:
    entry = {"instance": "load", "package": "ld", "package_digest": "0123456789abcdef", "provider": provider,
             "source": source, "source_sha256": source_sha256(source),
             "fills": ["tmap_x"], "reads": ["x"], "facts": []}
    cubins = [sha256_hex(cubin)]
    return {
        "kernel": "k", "block": [128, 1, 1], "grid": ["1", "1", "1"],
        "params": {"size": 192, "by_name": {"x": "ptr", "tmap_x": "tmap"},
                   "fields": [{"instance": "load", "name": "x", "type": "ptr", "offset": 0},
                              {"instance": "load", "name": "tmap_x", "type": "tmap", "offset": 64}]},
        "facts": {},
        "host": [entry],
        "host_binding": {"cubin_sha256": cubins, "digest": binding_digest(cubins, [
            (entry["instance"], entry["package"], entry["package_digest"], entry["provider"], entry["source_sha256"])])},
    }


def write_kernel(d: Path, m: dict, cubin: bytes = CUBIN, stem: str = "k") -> Path:
    (d / f"{stem}.cubin").write_bytes(cubin)
    (d / f"{stem}.manifest.json").write_text(json.dumps(m))
    return d / f"{stem}.cubin"


def refused(fn, *a, **kw) -> Rejected:
    """The refusal (R-HOST is a HostError, the others LaunchError: both Rejected with a .code)."""
    with pytest.raises(Rejected) as e:
        fn(*a, **kw)
    return e.value


@pytest.fixture
def marker(tmp_path, monkeypatch):
    monkeypatch.delenv(TRUST_ENV, raising=False)
    return tmp_path / "provider-ran"


def test_edited_provider_source_is_refused_before_it_runs(tmp_path, marker):
    m = manifest_dict(marker_source(marker))
    m["host"][0]["source"] += "# edited\n"
    e = refused(Kernel.load, write_kernel(tmp_path, m), trust_host_code=True)  # opting in does not skip the binding
    assert e.code == "R-HOST" and "edited after linking" in str(e) and e.diagnostics[0].hint
    # ... nor does editing the recorded sha256 too: the binding digest covers it
    m["host"][0]["source_sha256"] = source_sha256(m["host"][0]["source"])
    e = refused(Kernel.load, write_kernel(tmp_path, m), trust_host_code=True)
    assert e.code == "R-HOST" and "host_binding.digest" in str(e)
    assert not marker.exists()


def test_manifest_paired_with_another_cubin_is_refused(tmp_path, marker):
    m = manifest_dict(marker_source(marker))
    e = refused(Kernel.load, write_kernel(tmp_path, m, cubin=b"\x7fELF another kernel"), trust_host_code=True)
    assert e.code == "R-HOST" and "belongs to another cubin" in str(e) and "one link" in e.diagnostics[0].hint
    assert not marker.exists()


def test_control_cubin_is_bound_through_the_linked_cubin_beside_it(tmp_path, marker):
    m = Manifest.from_dict(manifest_dict(marker_source(marker)))
    control = tmp_path / "k.control.cubin"
    control.write_bytes(b"\x7fELF the control build")
    e = refused(verify_binding, m, control.read_bytes(), control)  # no linked cubin beside it
    assert e.code == "R-HOST"
    (tmp_path / "k.cubin").write_bytes(CUBIN)
    verify_binding(m, control.read_bytes(), control)
    (tmp_path / "k.cubin").write_bytes(b"\x7fELF a stale linked cubin")
    assert refused(verify_binding, m, control.read_bytes(), control).code == "R-HOST"
    assert not marker.exists()


def test_foreign_provider_needs_opt_in(tmp_path, marker):
    m = manifest_dict(marker_source(marker))
    e = refused(Kernel.load, write_kernel(tmp_path, m))
    d = e.diagnostics[0]
    assert e.code == "R-HOST" and "outside this workspace" in d.message
    assert "trust_host_code=True" in d.hint and m["host_binding"]["digest"] in d.hint and TRUST_ENV in d.hint
    assert not marker.exists()


def test_opt_in_runs_the_provider(tmp_path, marker, monkeypatch):
    d = manifest_dict(marker_source(marker))
    m = Manifest.from_dict(d)
    digest = d["host_binding"]["digest"]
    for trust in (True, {digest}, [digest], digest):
        check_host_code(m, CUBIN, trust_host_code=trust)
    assert refused(check_host_code, m, CUBIN, trust_host_code={"0" * 64}).code == "R-HOST"  # another build's digest
    for env in ("1", digest, f"{'0' * 64},{digest}"):
        monkeypatch.setenv(TRUST_ENV, env)
        check_host_code(m, CUBIN)
    monkeypatch.setenv(TRUST_ENV, "0")
    assert refused(check_host_code, m, CUBIN).code == "R-HOST"
    assert not marker.exists()
    p = plan_launch(m, {"x": 4096}, builtins={"num_sms": 1, "resident_ctas": 1}, host=object())
    assert marker.read_text() == "ran" and p.params[64:192] == bytes(128)


def test_opted_in_load_gets_past_the_host_checks(tmp_path, marker):
    e = refused(Kernel.load, write_kernel(tmp_path, manifest_dict(marker_source(marker))), trust_host_code=True)
    assert e.code != "R-HOST"  # the driver's turn (R-DEVICE / R-CUDA here); providers run only when planning
    assert not marker.exists()


def test_workspace_provider_is_trusted_by_default(marker):
    """The in-repo kernels' providers (checked in here) run without an opt-in, wherever the build lies."""
    source = (ROOT / "kernels" / "gemm" / "tma_loader_host.py").read_text()
    m = Manifest.from_dict(manifest_dict(source, provider="tma_loader_host.py"))
    check_host_code(m, CUBIN)
    renamed = Manifest.from_dict(manifest_dict(source, provider="other_host.py"))  # same bytes, another file's name
    assert refused(check_host_code, renamed, CUBIN).code == "R-HOST"


def test_unbound_manifest_and_bad_flag(marker):
    d = manifest_dict(marker_source(marker))
    old = copy.deepcopy(d)
    del old["host_binding"]
    e = refused(check_host_code, Manifest.from_dict(old), CUBIN, trust_host_code=True)
    assert e.code == "R-HOST" and "relink" in e.diagnostics[0].hint
    old = copy.deepcopy(d)
    del old["host"][0]["package_digest"]
    assert refused(check_host_code, Manifest.from_dict(old), CUBIN, trust_host_code=True).code == "R-HOST"
    assert refused(check_host_code, Manifest.from_dict(d), CUBIN, trust_host_code=1).code == "R-PARAM"
    d["host_binding"]["cubin_sha256"] = "abc"
    assert refused(Manifest.from_dict, d).code == "R-MANIFEST"
    assert not marker.exists()


def test_built_manifest_is_bound():
    """A kernel the Bazel rules linked carries the binding, and its cubin matches it."""
    cubin = ROOT / "bazel-bin" / "kernels" / "gemm_swiglu_tma.cubin"
    if not cubin.is_file():
        pytest.skip("tools/bazel build //kernels:gemm_swiglu_tma first")
    m = Manifest.from_file(cubin.with_name("gemm_swiglu_tma.manifest.json"))
    if m.host_binding is None:
        pytest.skip("bazel-bin holds a build from before the binding")
    check_host_code(m, cubin.read_bytes())  # bound, and the providers are this workspace's


def test_package_with_provider_code_must_record_digests(tmp_path):
    from pipelink.linker.package_io import read_package

    meta = {"format": 1, "name": "ld", "toolkit": "12.8", "contract_file": "ld.contract.toml", "objects": ["ld.o"],
            "sources": [], "copts": [], "host": ["ld_host.py"],
            "measured": {"handles": [], "own_facts": {}, "static_smem": 0, "regs": {}}}
    path = tmp_path / "ld.plpkg"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("pipelink-package.json", json.dumps(meta))
        z.writestr("contract.toml", "")
        z.writestr("objects/ld.o", b"")
        z.writestr("host/ld_host.py", "def provide(lent, facts, host):\n    return {}\n")
    with pytest.raises(Rejected) as e:
        read_package(str(path))
    assert e.value.diagnostics[0].code == "P-PACKAGE" and "no digests" in e.value.diagnostics[0].message
