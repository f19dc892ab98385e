"""A py_test on pipelink's Python toolchain runs when the interpreter's path holds a space.

pipelink's own py_tests (root module) run on @pipelink_python//:python_toolchain. Its py_runtime
gave Bazel's stub the `#!` line `#!<interpreter>`, which Linux splits at the first blank: with
the venv under `My Projects/` every py_test failed before running. The stub now starts as a
/bin/sh script that execs the quoted interpreter (cuda_configure_files.py_stub_shebang).

A workspace in a temporary directory registers that toolchain as pipelink's MODULE.bazel does
for its py_tests, with the interpreter reached through a folder named with a space, `$`, and
quotes, and runs a py_test that needs the venv (z3) and reports sys.executable.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from helpers.bazel import bazel_cmd, bazel_skip_reason, rmtree

REPO = Path(__file__).resolve().parents[2]
_REASON = bazel_skip_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

MODULE = """\
module(name = "py_stub_check")

bazel_dep(name = "pipelink", version = "0.1.0")
archive_override(
    module_name = "pipelink",
    integrity = "{integrity}",
    strip_prefix = "pipelink",
    urls = ["file://{archive}"],
)

bazel_dep(name = "rules_python", version = "0.22.1")

pipelink = use_extension("@pipelink//pipelink_rules:extensions.bzl", "pipelink_toolchains")
pipelink.python(interpreter = {python})
use_repo(pipelink, "pipelink_python")

# As pipelink's MODULE.bazel registers it for its own py_tests.
register_toolchains("@pipelink_python//:python_toolchain")
"""

BUILD = """\
load("@rules_python//python:defs.bzl", "py_test")

py_test(name = "venv_test", srcs = ["venv_test.py"], size = "small")
"""

TEST = """\
import sys
import z3  # only the venv has it
print("PYTHON=" + sys.executable)
"""


def test_py_test_runs_on_an_interpreter_whose_path_has_a_space(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    spaced = tmp_path / 'my venv $HOME "q"'
    spaced.symlink_to(REPO / ".venv")  # python finds the venv's pyvenv.cfg through the link
    python = spaced / "bin" / "python"
    rev = subprocess.run(["git", "stash", "create"], cwd=REPO, capture_output=True, text=True).stdout.strip() or "HEAD"
    archive = tmp_path / "pipelink.tar.gz"
    subprocess.run(["git", "archive", "--format=tar.gz", "--prefix=pipelink/", "-o", str(archive), rev], cwd=REPO, check=True)
    integrity = "sha256-" + base64.b64encode(hashlib.sha256(archive.read_bytes()).digest()).decode()
    python_literal = '"' + str(python).replace("\\", "\\\\").replace('"', '\\"') + '"'
    (ws / "MODULE.bazel").write_text(MODULE.format(integrity=integrity, archive=archive, python=python_literal))
    (ws / ".bazelrc").write_text("")
    (ws / "BUILD.bazel").write_text(BUILD)
    (ws / "venv_test.py").write_text(TEST)
    env = dict(os.environ, PIPELINK_EXTRA_MOUNTS=str(tmp_path))
    for v in ("PIPELINK_PYTHON", "PIPELINK_CUDA_HOME", "PIPELINK_CUTLASS_INCLUDE", "VIRTUAL_ENV"):
        env.pop(v, None)
    base = bazel_cmd() + [f"--output_base={tmp_path / 'ob'}"]
    try:
        res = subprocess.run(base + ["test", "--color=no", "--curses=no", "--test_output=all", "//:venv_test"],
                             cwd=ws, env=env, capture_output=True, text=True, timeout=900)
        out = res.stdout + res.stderr
        assert res.returncode == 0, out[-6000:]
        assert f"PYTHON={python}" in out, out[-3000:]
    finally:
        subprocess.run(base + ["shutdown"], cwd=ws, env=env, capture_output=True, timeout=300)
        rmtree(tmp_path)
