"""`--origin PATH=LABEL` (origins.py): either side may hold '=', PATH must be a file the command
reads, and every form that cannot be read one way is E-ORIGIN before any work.

It used to be split at the first '=', so a path `out/a=b/c.contract.toml` became the path
`out/a` and the label `b/c.contract.toml=//pkg:t` (its facts lost their owner), and a value with
no '=' was silently dropped.
"""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import TOY, kernel_text
from pipelink.linker import cli
from pipelink.common.diagnostics import Diagnostic, Fact, Rejected
from pipelink.linker.origins import annotate, resolve_origins


def run_json(capsys, *argv) -> tuple[int, list[dict]]:
    rc = cli.main(["--format=json", *map(str, argv)])
    out = capsys.readouterr().out
    return rc, (json.loads(out)["diagnostics"] if rc and out.strip().startswith("{") else [])


def bad_contract(d):
    """A contract pack refuses with a diagnostic citing its own path and line (E-FILE, line 2)."""
    d.mkdir(parents=True, exist_ok=True)
    c = d / "bad.contract.toml"
    c.write_bytes(b'[component]\nname = "x\xff"\n')
    return c


def test_path_and_label_with_equals_signs_name_the_owner(tmp_path, capsys, toy):
    contract = bad_contract(tmp_path / "a=b")
    rc, diags = run_json(capsys, "pack", "--contract", contract, "--object", toy.objects["producer"],
                         "--out", tmp_path / "x.plpkg", "--origin", f"{contract}=//pkg:t=1")
    assert rc == 1 and [d["code"] for d in diags] == ["E-FILE"], diags
    assert diags[0]["facts"][0]["origin"] == f"{contract}:2 [//pkg:t=1]"


def test_link_origins_name_the_kernel_file_and_the_recorded_contracts(tmp_path, capsys, packer, toy):
    kdir = tmp_path / "k=1"
    kdir.mkdir()
    kernel = kdir / "toy.kernel.toml"
    kernel.write_text(kernel_text("toy", ("p", "producer"), ("q", "nope")))
    pkgs = [str(packer.save(p)) for p in toy.packages]
    recorded = toy.producer.contract.file  # the contract path as pack recorded it: cited by link, not an input
    rc, diags = run_json(capsys, "plan", "--kernel", kernel, *[a for p in pkgs for a in ("--package", p)],
                         "--origin", f"{kernel}=//k:k=1", "--origin", f"{recorded}=//c:producer")
    assert rc == 1 and "L-INSTANCE" in [d["code"] for d in diags], diags
    cited = [f["origin"] for d in diags for f in d["facts"] if f["origin"].startswith(str(kernel))]
    assert cited and all(o.endswith(" [//k:k=1]") for o in cited), cited


@pytest.mark.parametrize("case", ["no-equals", "no-label", "names-no-file", "newline-in-label", "two-labels",
                                  "ambiguous", "explain"])
def test_unreadable_origins_are_e_origin_before_any_work(tmp_path, capsys, toy, case):
    contract = tmp_path / "c"
    shutil.copy(TOY / "producer.contract.toml", contract)
    source = tmp_path / "c=d"  # a second file of the command whose name is the first's and "=d"
    shutil.copy(TOY / "producer.cu", source)
    origin = {"no-equals": [str(contract)], "no-label": [f"{contract}="], "names-no-file": [f"{tmp_path}/typo=//x:y"],
              "newline-in-label": [f"{contract}=//x:y\nerror L-FORGED: not from pipelink"],
              "two-labels": [f"{contract}=//x:y", f"{contract}=//x:z"], "ambiguous": [f"{contract}=d=//x:y"],
              "explain": [f"{contract}=//x:y"]}[case]
    out = tmp_path / "x.plpkg"
    argv = ["explain", "L-BIND"] if case == "explain" else \
        ["pack", "--contract", contract, "--object", toy.objects["producer"], "--source", source, "--out", out]
    rc, diags = run_json(capsys, *argv, *[a for o in origin for a in ("--origin", o)])
    assert rc == 2 and [d["code"] for d in diags] == ["E-ORIGIN"], diags
    assert diags[0]["hint"] and not out.exists()
    if case == "ambiguous":
        assert str(contract) in diags[0]["message"] and str(source) in diags[0]["message"]


def test_origins_for_the_files_given_are_accepted(tmp_path, capsys, toy):
    out = tmp_path / "x.plpkg"
    contract = TOY / "producer.contract.toml"
    rc, _ = run_json(capsys, "pack", "--contract", contract, "--object", toy.objects["producer"], "--out", out,
                     "--origin", f"{contract}=//toy:producer", "--origin", f"{toy.objects['producer']}=@r//a=b:c")
    assert rc == 0 and out.exists()


def test_resolve_and_annotate():
    table = resolve_origins(["a=b/c.toml=//p:x=y", "k.toml=//k"], ["a=b/c.toml", "k.toml", "obj.o"])
    assert table == [("a=b/c.toml", "//p:x=y"), ("k.toml", "//k")]
    diag = Diagnostic("L-X", "m", facts=(Fact("c", "t", "a=b/c.toml:3"), Fact("a", "t", "a:3"), Fact("k", "t", "k.toml")))
    assert [f.origin for f in annotate([diag], table)[0].facts] == ["a=b/c.toml:3 [//p:x=y]", "a:3", "k.toml [//k]"]
    # lenient (a command that failed before it knew its files): what cannot be split is dropped
    assert resolve_origins(["x", "a=b=c", "a=//q"], ["a", "a=b"], strict=False) == [("a", "//q")]
    with pytest.raises(Rejected) as e:
        resolve_origins(["a=b=c"], ["a", "a=b"])
    assert e.value.codes == ["E-ORIGIN"]
