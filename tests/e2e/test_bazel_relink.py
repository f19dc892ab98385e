"""End-to-end test of the pipelink Bazel rules: incremental relinking, caching, determinism.

Drives the nested workspace tests/e2e/relink (four toy components, three fused kernels for
sm_90a that share them, and k1 again for sm_100a and sm_120a) through tools/bazel, on a
copy under .pipelink/e2e/relink (same depth, so its ../../.. paths reach this repo), and
counts the actions Bazel ran from --execution_log_json_file:

  * a cold build runs every compile/pack/link once; a no-op build runs nothing;
  * editing one component's source reruns exactly its compiles + packs and the links of
    the kernels that include it;
  * changing an owner's fact (contract + -D define) reruns the owner and every link, but
    no reader's compile;
  * a clean rebuild against --disk_cache runs nothing locally;
  * two output bases give bit-identical outputs, and no output holds an absolute path;
  * a contract conflict fails the build with the linker's code, both sides and the lines;
  * fused_kernel_sass_test passes (linked SASS == the one-translation-unit control build).

Timings (cold, no-op, one-component relink) go to .pipelink/e2e/relink_timings.json.
Skips (with the reason) when Bazel, the Bazel root or the CUDA wheels are unavailable.
Set PIPELINK_BAZEL to use another Bazel launcher than tools/bazel.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from helpers.bazel import COUNTED, LINKS, SRC_WS, TARGETS, bazel_cmd, bazel_skip_reason, rmtree, venv_paths

from pipelink.linker.execlog import read_spawns

REPO = Path(__file__).resolve().parents[2]
E2E = REPO / ".pipelink" / "e2e"
WS = E2E / "relink"  # same depth as tests/e2e/relink

_REASON = bazel_skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")





class Workspace:
    def __init__(self) -> None:
        self.ob1 = E2E / "ob1"
        self.ob2 = E2E / "ob2"
        self.disk_cache = E2E / "disk_cache"
        self.logs = E2E / "logs"
        self.timings: dict[str, float] = {}
        self.used: set[Path] = set()

    def bazel(self, *args: str, ob: Path | None = None, log: str | None = None, check: bool = True,
              disk_cache: bool = True) -> subprocess.CompletedProcess:
        ob = ob or self.ob1
        self.used.add(ob)
        cmd = bazel_cmd() + [f"--output_base={ob}", args[0], "--color=no", "--curses=no"]
        if args[0] in ("build", "test"):
            if disk_cache:
                cmd.append(f"--disk_cache={self.disk_cache}")
            if log:
                cmd.append(f"--execution_log_json_file={self.logs / (log + '.json')}")
        cmd += list(args[1:])
        res = subprocess.run(cmd, cwd=WS, capture_output=True, text=True, timeout=1800)
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-6000:]}")
        return res

    def spawns(self, log: str) -> list[dict]:
        return read_spawns(self.logs / (log + ".json"))

    def ran(self, log: str) -> dict[str, collections.Counter]:
        """mnemonic -> Counter(target label) of the spawns that really ran (not cache hits)."""
        out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for s in self.spawns(log):
            if s.get("cacheHit") or s.get("remoteCacheHit"):
                continue
            out[s.get("mnemonic", "?")][s.get("targetLabel", "?")] += 1
        return out

    def timed_build(self, name: str, *targets: str, **kw) -> subprocess.CompletedProcess:
        t0 = time.monotonic()
        res = self.bazel("build", *targets, log=name, **kw)
        self.timings[name] = round(time.monotonic() - t0, 2)
        return res

    def edit(self, rel: str, old: str, new: str) -> None:
        p = WS / rel
        text = p.read_text()
        assert old in text, f"{old!r} not in {rel}"
        p.write_text(text.replace(old, new, 1))


def _counted(ran: dict[str, collections.Counter]) -> dict[str, dict[str, int]]:
    return {m: dict(c) for m, c in ran.items() if m in COUNTED and c}


@pytest.fixture(scope="module")
def ws():
    E2E.mkdir(parents=True, exist_ok=True)
    for ob in (E2E / "ob1", E2E / "ob2"):  # a server left by an earlier run
        if (ob / "server").exists() and WS.exists():
            subprocess.run(bazel_cmd() + [f"--output_base={ob}", "shutdown"], cwd=WS, capture_output=True, timeout=300)
    for d in ("relink", "ob1", "ob2", "disk_cache", "logs"):
        rmtree(E2E / d)
    shutil.copytree(SRC_WS, WS, ignore=shutil.ignore_patterns("bazel-*", "user.bazelrc"))
    (E2E / "logs").mkdir()
    env = venv_paths()
    (WS / "user.bazelrc").write_text("".join(f"common --repo_env={k}={v}\n" for k, v in sorted(env.items())))
    w = Workspace()
    yield w
    for ob in sorted(w.used):
        subprocess.run(bazel_cmd() + [f"--output_base={ob}", "shutdown"], cwd=WS, capture_output=True, timeout=300)
    (E2E / "relink_timings.json").write_text(json.dumps(w.timings, indent=2, sort_keys=True) + "\n")
    print("\nrelink e2e timings (s):", json.dumps(w.timings, sort_keys=True))


def test_cold_build_runs_each_action_once_and_a_noop_build_none(ws):
    t0 = time.monotonic()
    ws.bazel("build", "--nobuild", *TARGETS)  # start the server, fetch the toolchain repos, analyse
    ws.timings["cold_server_and_analysis"] = round(time.monotonic() - t0, 2)
    ws.timed_build("cold", *TARGETS)
    ran = _counted(ws.ran("cold"))
    # owner and reader: 3 archs each; reader2, extra: sm_90a only.
    assert ran["CudaCompile"] == {"//:owner": 3, "//:reader": 3, "//:reader2": 1, "//:extra": 1}, ran
    assert ran["PipelinkPack"] == ran["CudaCompile"], ran
    assert ran["PipelinkLink"] == {k: 1 for k in LINKS}, ran
    assert "PipelinkControlLink" not in ran, "a normal build must not build the control cubin"

    ws.timed_build("noop", *TARGETS)
    assert ws.spawns("noop") == [], "a no-op build ran actions"


def test_sass_test_reports_identical(ws):
    res = ws.bazel("test", "//:k1_sass_test", "--test_output=all")
    assert "identical" in res.stdout + res.stderr


def test_edit_one_component(ws):
    ws.bazel("build", *TARGETS)
    # reader2 is only in k2.
    ws.edit("toys/reader2.cu", "3.0f * float(i)", "5.0f * float(i)")
    ws.timed_build("relink_reader2", *TARGETS)
    assert _counted(ws.ran("relink_reader2")) == {
        "CudaCompile": {"//:reader2": 1},
        "PipelinkPack": {"//:reader2": 1},
        "PipelinkLink": {"//:k2": 1},
    }
    # reader is in k1, k3 and (other archs) k1_sm100a, k1_sm120a.
    ws.edit("toys/reader.cu", "2.0f * float(i)", "4.0f * float(i)")
    ws.timed_build("relink_reader", *TARGETS)
    assert _counted(ws.ran("relink_reader")) == {
        "CudaCompile": {"//:reader": 3},
        "PipelinkPack": {"//:reader": 3},
        "PipelinkLink": {"//:k1": 1, "//:k3": 1, "//:k1_sm100a": 1, "//:k1_sm120a": 1},
    }


def test_owner_fact_change_does_not_recompile_readers(ws):
    ws.bazel("build", *TARGETS)
    ws.edit("toys/owner.contract.toml", "own = 64", "own = 128")
    ws.edit("BUILD.bazel", 'defines = ["RELINK_WIDTH=64"]', 'defines = ["RELINK_WIDTH=128"]')
    ws.timed_build("owner_fact", *TARGETS)
    ran = _counted(ws.ran("owner_fact"))
    assert ran["CudaCompile"] == {"//:owner": 3}, ran  # no reader/reader2/extra compile
    assert ran["PipelinkPack"] == {"//:owner": 3}, ran
    assert ran["PipelinkLink"] == {k: 1 for k in LINKS}, ran
    report = json.loads((WS / "bazel-bin" / "k1.report.json").read_text())
    assert "128" in json.dumps(report)


def test_diagnostics_surface_as_build_errors(ws):
    res = ws.bazel("build", "//:k_bad", check=False)
    assert res.returncode != 0
    err = res.stderr
    assert "Linking fused kernel //:k_bad" in err, err[-3000:]
    assert "L-FACT-ACCEPT" in err, err[-3000:]
    assert "toys/owner_wide.contract.toml:" in err and "toys/reader.contract.toml:" in err, err[-3000:]
    assert "own = 2048" in err and "max = 1024" in err, err[-3000:]
    # The rules name the Bazel target of each file the linker cites.
    assert re.search(r"toys/owner_wide\.contract\.toml:\d+ \[//:owner_wide\]", err), err[-3000:]
    assert re.search(r"toys/reader\.contract\.toml:\d+ \[//:reader\]", err), err[-3000:]
    assert "Traceback" not in err


def test_clean_rebuild_from_disk_cache_runs_nothing(ws):
    ws.bazel("build", *TARGETS)
    ws.bazel("clean")
    ws.timed_build("clean_disk_cache", *TARGETS)
    ran = _counted(ws.ran("clean_disk_cache"))
    assert ran == {}, f"actions ran despite the disk cache: {ran}"
    assert any(s.get("cacheHit") or s.get("remoteCacheHit") for s in ws.spawns("clean_disk_cache"))


def _outputs(ob: Path) -> dict[str, str]:
    out = {}
    root = ob / "execroot" / "_main" / "bazel-out"
    for p in sorted(root.glob("*/bin/**/*")):
        if p.is_file() and p.name.endswith((".cubin", ".plpkg", ".o", ".manifest.json", ".report.json", ".map.txt")):
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def test_two_output_bases_bit_identical(ws):
    ws.bazel("build", *TARGETS)
    ws.bazel("shutdown")
    ws.bazel("build", *TARGETS, ob=ws.ob2, disk_cache=False, log="ob2")
    assert _counted(ws.ran("ob2"))["PipelinkLink"] == {k: 1 for k in LINKS}  # really rebuilt
    a, b = _outputs(ws.ob1), _outputs(ws.ob2)
    # ob1's last build came from the disk cache, which only materialises top-level outputs;
    # compare those and every intermediate file both output bases hold.
    top = {f"k8-fastbuild/bin/{k[3:]}{ext}" for k in LINKS for ext in (".cubin", ".manifest.json", ".report.json", ".map.txt")}
    assert top <= a.keys() and top <= b.keys(), (sorted(top - a.keys()), sorted(top - b.keys()))
    common = a.keys() & b.keys()
    differ = sorted(k for k in common if a[k] != b[k])
    assert not differ, f"outputs differ between output bases: {differ}"
    root = ws.ob2 / "execroot" / "_main" / "bazel-out"
    for rel in b:
        data = (root / rel).read_bytes()
        for needle in (str(ws.ob2), str(REPO), "/tmp/"):
            assert needle.encode() not in data, f"{rel} contains the absolute path {needle}"
