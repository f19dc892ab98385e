"""pipelink as an external module, the way README's "Use from your workspace" says.

A consumer workspace in a temporary directory depends on pipelink through `archive_override`
of a `git archive` of this checkout (uncommitted edits of tracked files included, via
`git stash create`). As a new user would lay it out: the archive lies outside the workspace
(tools/bazel mounts what MODULE.bazel's file:// URLs name, with no PIPELINK_EXTRA_MOUNTS), the
targets live in `k/BUILD.bazel` and the workspace has no root BUILD file. Its MODULE.bazel
configures the linker's interpreter with the `pipelink_toolchains.python` tag and leaves the
CUDA toolkit to detection (the NVIDIA wheels of that interpreter); its .bazelrc is empty. Checked:

  * a component and a fused kernel build, also for another arch through
    `--@pipelink//pipelink_rules:arch=sm_100a`;
  * `bazel query 'deps(//:k1)'` works (the offline stubs are complete enough);
  * the consumer's own py_binary does not run on pipelink's interpreter;
  * without any pipelink_toolchains tag, the interpreter is found in the root module's .venv.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from test_bazel_relink import SRC_WS, _bazel_cmd, _rmtree, _skip_reason

REPO = Path(__file__).resolve().parents[1]
VENV_PY = REPO / ".venv" / "bin" / "python"


def _reason() -> str | None:
    r = _skip_reason()
    if r:
        return r
    if not (REPO / ".git").exists():
        return "not a git checkout (the test builds pipelink from `git archive`)"
    return None


_REASON = _reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

BUILD = """\
load("@pipelink//pipelink_rules:defs.bzl", "cuda_component", "fused_kernel")
load("@rules_python//python:defs.bzl", "py_binary")

cuda_component(
    name = "owner",
    srcs = ["toys/owner.cu"],
    hdrs = ["toys/relink_params.h"],
    contract = "toys/owner.contract.toml",
    defines = ["RELINK_WIDTH=64"],
)

cuda_component(
    name = "reader",
    srcs = ["toys/reader.cu"],
    hdrs = ["toys/relink_params.h"],
    contract = "toys/reader.contract.toml",
)

fused_kernel(
    name = "k1",
    components = [":owner", ":reader"],
    kernel = "toys/k1.kernel.toml",
)

# The consumer's own Python: must not be pipelink's linker interpreter.
py_binary(
    name = "which_python",
    srcs = ["which_python.py"],
)
"""

MODULE = """\
module(name = "my_kernels")

bazel_dep(name = "pipelink", version = "0.1.0")
archive_override(
    module_name = "pipelink",
    integrity = "{integrity}",
    strip_prefix = "pipelink",
    urls = ["file://{archive}"],
)

bazel_dep(name = "rules_python", version = "0.22.1")

pipelink = use_extension("@pipelink//pipelink_rules:extensions.bzl", "pipelink_toolchains")
pipelink.python(interpreter = "{python}")
"""


@pytest.fixture(scope="module")
def consumer(tmp_path_factory):
    top = tmp_path_factory.mktemp("consumer")
    ws = top / "my_kernels"
    ws.mkdir()
    rev = subprocess.run(["git", "stash", "create"], cwd=REPO, capture_output=True, text=True).stdout.strip() or "HEAD"
    archive = top / "archives" / "pipelink-0.1.0.tar.gz"  # outside the workspace, as README shows
    archive.parent.mkdir()
    subprocess.run(["git", "archive", "--format=tar.gz", "--prefix=pipelink/", "-o", str(archive), rev],
                   cwd=REPO, check=True)
    integrity = "sha256-" + base64.b64encode(hashlib.sha256(archive.read_bytes()).digest()).decode()
    (ws / "MODULE.bazel").write_text(MODULE.format(integrity=integrity, archive=archive, python=VENV_PY))
    (ws / ".bazelrc").write_text("")  # nothing to copy from pipelink
    (ws / "k").mkdir()
    (ws / "k" / "BUILD.bazel").write_text(BUILD)  # no BUILD file in the root package
    (ws / "k" / "which_python.py").write_text("import sys\nprint('PYTHON=' + sys.executable)\n")
    shutil.copytree(SRC_WS / "toys", ws / "k" / "toys")
    ob = top / "ob"
    env = dict(os.environ)
    env.pop("PIPELINK_EXTRA_MOUNTS", None)
    for v in ("PIPELINK_PYTHON", "PIPELINK_CUDA_HOME", "PIPELINK_CUTLASS_INCLUDE", "VIRTUAL_ENV"):
        env.pop(v, None)  # detection must come from the tags and the interpreter alone

    def bazel(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = _bazel_cmd() + [f"--output_base={ob}", args[0], "--color=no", "--curses=no", *args[1:]]
        res = subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=900)
        if check and res.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-6000:]}")
        return res

    try:
        yield ws, bazel
    finally:
        bazel("shutdown", check=False)
        _rmtree(top)


def test_builds_from_git_archive(consumer):
    ws, bazel = consumer
    assert not (ws / "BUILD.bazel").exists() and not (ws / "BUILD").exists()
    bazel("build", "//k:k1")
    assert (ws / "bazel-bin" / "k" / "k1.cubin").stat().st_size > 0
    res = bazel("build", "//k:owner", "--@pipelink//pipelink_rules:arch=sm_100a")
    assert "Build completed successfully" in res.stderr, res.stderr[-3000:]


def test_query_deps(consumer):
    _ws, bazel = consumer
    res = bazel("query", "deps(//k:k1)")
    assert "//k:owner" in res.stdout and "@pipelink//tools:pipelink_linker_files" in res.stdout.replace("@@pipelink~", "@pipelink"), res.stdout[-2000:]


def test_consumer_py_binary_is_not_on_pipelinks_interpreter(consumer):
    _ws, bazel = consumer
    res = bazel("run", "//k:which_python")
    line = [x for x in res.stdout.splitlines() if x.startswith("PYTHON=")]
    assert line, res.stdout + res.stderr[-2000:]
    used = line[0][len("PYTHON="):]
    assert os.path.realpath(used) != os.path.realpath(VENV_PY) and not used.startswith(str(REPO / ".venv")), used


@pytest.mark.parametrize("tags, message", [
    ('pipelink.python(interpreter = "{python}")\n', "pipelink_toolchains.python is given 2 times"),
    ('pipelink.cuda(host_compiler = "/nonexistent/g++-14")\n', "host_compiler = /nonexistent/g++-14 does not exist"),
])
def test_bad_module_tags_are_coded(consumer, tags, message):
    """A repeated tag or a tag naming a missing path fails with B-MODULE and a hint (under the
    Starlark call stack Bazel < 9.0.1 prints for every fail())."""
    ws, bazel = consumer
    module = ws / "MODULE.bazel"
    good = module.read_text()
    try:
        module.write_text(good + tags.format(python=VENV_PY))
        res = bazel("build", "--nobuild", "//k:k1", check=False)
        assert res.returncode != 0
        assert "pipelink B-MODULE: " in res.stderr and message in res.stderr and ". hint: " in res.stderr, res.stderr[-3000:]
    finally:
        module.write_text(good)


def test_no_tags_finds_the_root_modules_venv(consumer):
    """Without pipelink_toolchains tags the linker's interpreter is <root module>/.venv/bin/python
    (the root module's directory comes from the invocation's workspace root, not from a label
    that would need a root BUILD file)."""
    ws, bazel = consumer
    module = ws / "MODULE.bazel"
    good = module.read_text()
    venv = ws / ".venv"
    try:
        module.write_text("\n".join(l for l in good.splitlines() if not l.startswith("pipelink.python(")) + "\n")
        venv.symlink_to(VENV_PY.parent.parent)
        bazel("build", "//k:k1")
        assert (ws / "bazel-bin" / "k" / "k1.cubin").stat().st_size > 0
    finally:
        module.write_text(good)
        venv.unlink(missing_ok=True)
