"""Inputs and outputs that are not regular files, inputs too large for their kind, and writes
interrupted half-way: each is a coded diagnostic, never a hang, a traceback, a replaced device
file or a lost earlier output.

Found by a hunt beyond the fuzzer's families: a FIFO given as --contract, --kernel, --package or
a cubin blocked forever in open(); /dev/zero read until memory ran out; `--out /dev/null`, run
as root, replaced /dev/null with a regular file; a Ctrl-C (or Bazel's SIGTERM) between two
renames of write_all deleted the earlier outputs it had moved aside.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from conftest import TOY, rejected
from pipelink.linker import cli
from pipelink.common.diagnostics import CODES
from pipelink.runtime.launch_error import LaunchError


def run_cli(capsys, *argv) -> tuple[int, list[dict]]:
    rc = cli.main(["--format=json", *map(str, argv)])
    out = capsys.readouterr().out
    diags = json.loads(out)["diagnostics"] if rc and out.strip().startswith("{") else []
    for d in diags:
        assert d["code"] in CODES and d["code"] != "E-INTERNAL" and d["hint"], d
    return rc, diags


@pytest.fixture
def fifo(tmp_path) -> Path:
    p = tmp_path / "pipe"
    os.mkfifo(p)
    return p


@pytest.fixture
def sparse(tmp_path) -> Path:
    """A 5 GB file that takes no disk: more than any contract, kernel file or package."""
    p = tmp_path / "big"
    with open(p, "wb") as f:
        f.truncate(5 << 30)
    return p


def _special(kind: str, fifo: Path, sparse: Path) -> str:
    return {"fifo": str(fifo), "chardev": "/dev/zero", "huge": str(sparse)}[kind]


@pytest.mark.parametrize("kind", ["fifo", "chardev", "huge"])
@pytest.mark.parametrize("flag", ["--contract", "--object", "--source", "--kernel", "--package", "sass-diff"])
def test_special_input_is_e_file(tmp_path, capsys, packer, toy, fifo, sparse, kind, flag):
    bad = _special(kind, fifo, sparse)
    if flag in ("--contract", "--object", "--source"):
        args = {"--contract": TOY / "producer.contract.toml", "--object": toy.objects["producer"]}
        args[flag] = bad
        argv = ["pack", *[x for kv in args.items() for x in kv], "--out", tmp_path / "x.plpkg"]
    elif flag == "sass-diff":
        argv = ["sass-diff", bad, bad]
    else:
        pkgs = [str(packer.save(p)) for p in toy.packages]
        kernel = str(TOY / "toy.kernel.toml")
        if flag == "--kernel":
            kernel = bad
        else:
            pkgs[0] = bad
        argv = ["plan", "--kernel", kernel, *[a for p in pkgs for a in ("--package", p)]]
    rc, diags = run_cli(capsys, *argv)
    assert rc == 1 and [d["code"] for d in diags] == ["E-FILE"], diags
    assert any(w in diags[0]["message"] for w in ("FIFO", "character device", "larger than")), diags


@pytest.mark.parametrize("target", ["fifo", "socket"])
def test_special_output_is_e_output_and_left_alone(tmp_path, capsys, toy, fifo, target):
    """(Not /dev/null itself: were the check to regress, the test would replace the machine's.)"""
    out = str(fifo)
    if target == "socket":
        import socket

        out = str(tmp_path / "sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(out)
        s.close()
    before = os.stat(out)
    rc, diags = run_cli(capsys, "pack", "--contract", TOY / "producer.contract.toml", "--object", toy.objects["producer"],
                        "--out", out)
    assert rc == 1 and [d["code"] for d in diags] == ["E-OUTPUT"], diags
    after = os.stat(out)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)


def test_host_provider_that_is_a_fifo_is_p_host(tmp_path, fifo):
    from pipelink.linker.package import read_host_provider

    from types import SimpleNamespace

    host = SimpleNamespace(provider=fifo.name, origin="c.toml:3")
    contract = SimpleNamespace(host=host, file=str(tmp_path / "c.toml"))
    e = rejected(read_host_provider, contract, tmp_path)
    assert e.codes == ["P-HOST"] and "FIFO" in str(e.diagnostics[0].message)


# ---- interrupted writes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("at", [1, 2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_interrupt_between_renames_restores_earlier_outputs(tmp_path, monkeypatch, at, interrupt):
    """An interrupt at any rename of write_all leaves the earlier outputs as they were (the
    interrupt itself propagates) and no staging folder."""
    from pipelink.linker import outputs

    paths = [tmp_path / f"o{i}" for i in range(4)]
    for p in paths:
        p.write_text("earlier good output")
    real, calls = os.replace, []

    def interrupted(a, b):
        calls.append((a, b))
        if len(calls) == at:
            raise interrupt()
        return real(a, b)

    monkeypatch.setattr(outputs.os, "replace", interrupted)
    with pytest.raises(interrupt):
        outputs.write_all([(str(p), b"new") for p in paths])
    assert [p.read_text() for p in paths] == ["earlier good output"] * 4
    assert sorted(x.name for x in tmp_path.iterdir()) == [p.name for p in paths]


def test_sigterm_during_a_command_cleans_up_and_exits_143(tmp_path, capsys, monkeypatch, toy):
    """SIGTERM (Bazel cancelling an action) while pack writes: exit 143, no staging folder, no
    partial output, and the caller's SIGTERM handler is back afterwards."""
    from pipelink.linker import outputs

    real = outputs.os.replace

    def killed(a, b):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(a, b)

    monkeypatch.setattr(outputs.os, "replace", killed)
    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "p.plpkg"
    rc = cli.main(["pack", "--contract", str(TOY / "producer.contract.toml"), "--object", str(toy.objects["producer"]),
                   "--out", str(out)])
    capsys.readouterr()
    assert rc == 143 and not out.exists() and list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) is before


# ---- the runtime's files ------------------------------------------------------------------------------

def test_runtime_refuses_special_and_deep_manifests(tmp_path, fifo):
    from pipelink.runtime.manifest import Manifest

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000)
    for path in (fifo, "/dev/zero", deep, tmp_path):
        e = rejected_launch(Manifest.from_file, path)
        assert e.code == "R-MANIFEST", e


@pytest.mark.parametrize("path", [None, 3, 2.5, True, ["k.cubin"]])
def test_runtime_path_arguments_are_checked(path):
    from pipelink.runtime.manifest import Manifest
    from pipelink.runtime import Kernel

    assert rejected_launch(Manifest.from_file, path).code == "R-PARAM"
    assert rejected_launch(Kernel.load, path).code == "R-PARAM"


def test_kernel_load_refuses_special_cubins(tmp_path, fifo):
    from pipelink.runtime.entry import expect_cubin
    from pipelink.runtime import Kernel

    for path in (fifo, "/dev/zero", tmp_path):
        assert rejected_launch(Kernel.load, path).code == "R-MANIFEST"
        assert rejected_launch(expect_cubin, path).code == "R-MANIFEST"


def rejected_launch(fn, *args) -> LaunchError:
    try:
        fn(*args)
    except LaunchError as e:
        assert e.hint.strip(), e
        return e
    raise AssertionError(f"accepted {args!r}")
