"""The Bazel rules' B-* codes stay in one table, documented and tested (no Bazel needed).

pipelink_rules/private/errors.bzl holds B_CODES; every code must have a row in
docs/CONTRACTS.md ("Bazel rule codes") and a failure test in tests/rules/failure_tests.bzl
(B-MODULE fails while evaluating the module extension, which analysis tests cannot reach: it is
tested in tests/e2e/test_bazel_consumer.py), and
no rule may fail without a code.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "pipelink_rules"


def _codes() -> list[str]:
    text = (RULES / "private" / "errors.bzl").read_text()
    table = text[text.index("B_CODES = {"):text.index("}", text.index("B_CODES = {"))]
    return re.findall(r'"(B-[A-Z-]+)":', table)


def test_every_code_is_documented():
    docs = (REPO / "docs" / "CONTRACTS.md").read_text()
    section = docs[docs.index("### Bazel rule codes (B-*)"):]
    missing = [c for c in _codes() if f"| {c} |" not in section]
    assert not missing, f"B-* codes without a row in docs/CONTRACTS.md: {missing}"
    documented = set(re.findall(r"^\| (B-[A-Z-]+) \|", section, re.M))
    assert documented == set(_codes()), documented ^ set(_codes())


def test_every_code_has_a_failure_test():
    cases = (REPO / "tests" / "rules" / "failure_tests.bzl").read_text()
    tested = set(re.findall(r'^\s*\("[^"]+", "(B-[A-Z-]+)",', cases, re.M))
    # B-MODULE: test_bazel_consumer.py; B-COMPILE (execution time): test_compile_failure_* below
    assert set(_codes()) - tested == {"B-MODULE", "B-COMPILE"}, set(_codes()) - tested
    assert tested <= set(_codes()), tested - set(_codes())


def test_no_uncoded_fail():
    bare = []
    for f in [*RULES.rglob("*.bzl"), *(REPO / "kernels").rglob("*.bzl"),
              *(REPO / "experiments").rglob("*.bzl")]:  # the rules, the kernel and experiment macros
        if f.name == "errors.bzl":
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            if re.search(r"(?<![\w.])fail\(", line):
                bare.append(f"{f.relative_to(REPO)}:{n}: {line.strip()}")
    assert not bare, "use pl_fail (errors.bzl) with a code and hint:\n" + "\n".join(bare)


# ---- B-COMPILE: nvcc_wrapper.sh, the compile action's executable, run here without Bazel ----------

def _compile(tmp_path: Path, source: str, *nvcc_args: str) -> subprocess.CompletedProcess:
    from pipelink.linker.toolkit import find_toolkit

    try:
        nvcc = find_toolkit().tool("nvcc")
    except Exception:
        pytest.skip("no nvcc (bash tools/setup.sh)")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "comp.cu").write_text(source)
    argv = ["sh", str(RULES / "private" / "nvcc_wrapper.sh"), f"test-{tmp_path.name}", "pkg/comp.cu", "pkg/comp.o",
            str(nvcc), "-dc", "-gencode=arch=compute_90a,code=lto_90a", *nvcc_args, "-o", "pkg/comp.o", "pkg/comp.cu"]
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_compile_failure_missing_header_names_it(tmp_path):
    res = _compile(tmp_path, '#include "tile.h"\n__device__ int f() { return TILE; }\n')
    assert res.returncode != 0 and "No such file or directory" in res.stderr  # nvcc's own error stays
    assert "pipelink B-COMPILE: pkg/comp.cu: nvcc failed" in res.stderr
    assert "hint: list tile.h in the component's hdrs" in res.stderr
    assert not (tmp_path / "pkg" / "comp.o").exists()


def test_compile_failure_static_assert_and_others(tmp_path):
    res = _compile(tmp_path, '#ifndef TILE\n#define TILE 64\n#endif\nstatic_assert(TILE == 64, "tile");\n', "-DTILE=32")
    assert res.returncode != 0 and "hint: the source refuses this build's defines" in res.stderr
    other = tmp_path / "other"
    other.mkdir()
    res = _compile(other, "__device__ int f() { return nope; }\n")
    assert res.returncode != 0 and "pipelink B-COMPILE" in res.stderr and "hint: fix the source" in res.stderr


def test_compile_success_is_unchanged(tmp_path):
    res = _compile(tmp_path, "__device__ int f() { return 1; }\n")
    assert res.returncode == 0 and "B-COMPILE" not in res.stderr and (tmp_path / "pkg" / "comp.o").exists()


# ---- B-SUBST at execution time: substitute_contract.py, the contract_substitutions action ----------

def _substitute(tmp_path: Path, subs: dict, facts: dict | None = None,
                contract_text: str = '[component]\nname = "c"\n[fact.tile]\ntype = "u32"\nown = 64  # variant: TILE\n',
                ) -> tuple[subprocess.CompletedProcess, Path]:
    import json
    import sys

    contract, out, js = tmp_path / "c.contract.toml", tmp_path / "out.toml", tmp_path / "subs.json"
    contract.write_text(contract_text)
    js.write_text(json.dumps(subs))
    args = [str(contract), str(out), str(js)]
    if facts is not None:
        (tmp_path / "facts.json").write_text(json.dumps(facts))
        args.append(str(tmp_path / "facts.json"))
    res = subprocess.run([sys.executable, "-s", str(RULES / "private" / "substitute_contract.py"), "//pkg:c", *args],
                         capture_output=True, text=True, timeout=60)
    return res, out


# ---- B-FACT at execution time: cuda_component(facts = ...) sets the owned fact's `own` line ----------

_FACTS_CONTRACT = ('[component]\nname = "c"\n\n[fact.tile]   # the tile\ntype = "u32"\nown = 64\n\n'
                   '[fact.width]\ntype = "u32"\naccept = [1, 2]\n\n[smem.buf]\nbytes = "tile * 4"\n')


def test_facts_set_the_owned_value_on_its_line(tmp_path):
    res, out = _substitute(tmp_path, {}, {"tile": "TILE=128"}, _FACTS_CONTRACT)
    assert res.returncode == 0, res.stderr
    assert out.read_text() == _FACTS_CONTRACT.replace("own = 64\n", "own = 128\n")


def test_facts_and_substitutions_apply_together(tmp_path):
    res, out = _substitute(tmp_path, {"tile * 4": "tile * 8"}, {"tile": "TILE=32"}, _FACTS_CONTRACT)
    assert res.returncode == 0, res.stderr
    assert "own = 32\n" in out.read_text() and '"tile * 8"' in out.read_text()


@pytest.mark.parametrize("fact", ["width", "depth"])  # read (accept only), and not declared at all
def test_a_fact_the_contract_does_not_own_is_b_fact(tmp_path, fact):
    res, out = _substitute(tmp_path, {}, {fact: "X=2"}, _FACTS_CONTRACT)
    assert res.returncode == 1 and not out.exists()
    assert "pipelink B-FACT: //pkg:c: attribute facts: " in res.stderr and f"owns no fact '{fact}'" in res.stderr
    assert "hint: list in `facts` only the facts whose [fact.<name>] table has an `own` value" in res.stderr


def test_substitution_applies_every_key(tmp_path):
    res, out = _substitute(tmp_path, {"64  # variant: TILE": "128  # variant: TILE"})
    assert res.returncode == 0 and "own = 128  # variant: TILE" in out.read_text()


def test_substitution_key_missing_from_the_contract_is_b_subst(tmp_path):
    res, out = _substitute(tmp_path, {"64  # variant: TILE": "128  # variant: TILE", "own = 32": "own = 16"})
    assert res.returncode == 1 and not out.exists()
    assert "pipelink B-SUBST: //pkg:c: attribute contract_substitutions: key 'own = 32' occurs nowhere" in res.stderr
    assert "hint: use a marker that occurs in the contract" in res.stderr


def test_substitution_is_one_pass_so_a_value_is_not_substituted_again(tmp_path):
    # Sequential replacing turned "@A@" into "@B@" and then into "1" (order-dependent).
    res, out = _substitute(tmp_path, {"64  # variant: TILE": "@T@  # variant: TILE", "@T@": "never"})
    assert res.returncode == 1 and not out.exists()  # "@T@" is not in the original contract
    assert "key '@T@' occurs nowhere" in res.stderr
    (tmp_path / "c2").mkdir()
    res, out = _substitute(tmp_path / "c2", {"own = 64": "own = 128", "128": "256"})
    assert res.returncode == 1 and not out.exists()  # "128" is not in the original either
    (tmp_path / "c3").mkdir()
    res, out = _substitute(tmp_path / "c3", {"u32": "u64", "type": "kind"})
    assert res.returncode == 0 and 'kind = "u64"' in out.read_text()


def test_substitution_key_inside_a_longer_key_is_b_subst(tmp_path):
    # The longer key wins where both start; a key left with no occurrence of its own is B-SUBST.
    res, out = _substitute(tmp_path, {"own = 64": "own = 128", "64": "32"})
    assert res.returncode == 1 and not out.exists()
    assert "key '64' occurs only inside another key's occurrence" in res.stderr
    assert "hint: use a marker that occurs in the contract" in res.stderr


@pytest.mark.parametrize("kind", ["not_utf8", "directory"])
def test_substitution_of_an_unreadable_contract_is_coded(tmp_path, kind):
    import json
    import sys

    contract, out, js = tmp_path / "c.contract.toml", tmp_path / "out.toml", tmp_path / "subs.json"
    if kind == "directory":
        contract.mkdir()
    else:
        contract.write_bytes(b'[component]\nname = "\xff"\n')
    js.write_text(json.dumps({"c": "d"}))
    res = subprocess.run([sys.executable, "-s", str(RULES / "private" / "substitute_contract.py"), "//pkg:c",
                          str(contract), str(out), str(js)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and not out.exists()
    assert "Traceback" not in res.stderr
    assert res.stderr.startswith("pipelink B-FILE-TYPE: //pkg:c: attribute contract: ")
    assert "hint: " in res.stderr


def test_substitution_of_non_ascii_text_as_bazel_writes_it(tmp_path):
    # Bazel 7 reads BUILD files as Latin-1 and writes the substitutions' JSON as UTF-8 of that:
    # {"café": "thé"} arrives as {"cafÃ©": "thÃ©"}; the key used to match nothing (B-SUBST) and a
    # non-ASCII value went into the contract garbled.
    import json
    import sys

    contract, out, js = tmp_path / "c.contract.toml", tmp_path / "out.toml", tmp_path / "subs.json"
    contract.write_text('[component]\nname = "c"  # café\n', encoding="utf-8")
    garbled = {k.encode("utf-8").decode("latin-1"): v.encode("utf-8").decode("latin-1")
               for k, v in {"café": "thé", '"c"': '"c"  # ünï'}.items()}
    js.write_text(json.dumps(garbled, ensure_ascii=False), encoding="utf-8")
    res = subprocess.run([sys.executable, "-s", str(RULES / "private" / "substitute_contract.py"), "//pkg:c",
                          str(contract), str(out), str(js)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert out.read_text(encoding="utf-8") == '[component]\nname = "c"  # ünï  # thé\n'


def test_compile_of_a_source_under_a_glob_named_directory_keeps_the_source(tmp_path):
    # nvcc_wrapper.sh split the source's directory with an unquoted `for part in $dir`, which
    # also glob-expanded it: `pkg/b*` became `pkg/bazel-out`, and its `rm -f` of the mirrored
    # source went through the symlink of the real `pkg/b*` and deleted the source.
    from pipelink.linker.toolkit import find_toolkit

    try:
        nvcc = find_toolkit().tool("nvcc")
    except Exception:
        pytest.skip("no nvcc (bash tools/setup.sh)")
    src = tmp_path / "pkg" / "b*" / "comp.cu"
    src.parent.mkdir(parents=True)
    (tmp_path / "bazel-out").mkdir()
    src.write_text("__device__ int f() { return 1; }\n")
    argv = ["sh", str(RULES / "private" / "nvcc_wrapper.sh"), f"test-glob-{tmp_path.name}", "pkg/b*/comp.cu", "pkg/b*/comp.o",
            str(nvcc), "-dc", "-gencode=arch=compute_90a,code=lto_90a", "-o", "pkg/b*/comp.o", "pkg/b*/comp.cu"]
    res = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert src.read_text() == "__device__ int f() { return 1; }\n"
    assert (tmp_path / "pkg" / "b*" / "comp.o").exists()


_BOOL_CONTRACT = '[component]\nname = "c"\n\n[fact.wide]   # a bool the component owns\ntype = "bool"\nown = false\n'


@pytest.mark.parametrize("given,own", [("WIDE=1", "true"), ("WIDE=0", "false")])
def test_a_bool_fact_is_set_true_or_false(tmp_path, given, own):
    # `own = 1` for a bool fact was C-SCHEMA at pack, far from the attribute that wrote it
    res, out = _substitute(tmp_path, {}, {"wide": given}, _BOOL_CONTRACT)
    assert res.returncode == 0, res.stderr
    assert out.read_text() == _BOOL_CONTRACT.replace("own = false\n", f"own = {own}\n")


def test_a_bool_fact_given_another_number_is_b_fact(tmp_path):
    res, out = _substitute(tmp_path, {}, {"wide": "WIDE=2"}, _BOOL_CONTRACT)
    assert res.returncode == 1 and not out.exists()
    assert "pipelink B-FACT: //pkg:c: attribute facts: " in res.stderr and "must set 0 or 1" in res.stderr


def test_a_line_of_brackets_and_blanks_is_read_at_once(tmp_path):
    # inside a multi-line string TOML allows it; the lazy header pattern backtracked cubically on it
    import time

    text = _FACTS_CONTRACT + 'note = """\n[' + " " * 4000 + '\n"""\n'
    t0 = time.monotonic()
    res, out = _substitute(tmp_path, {}, {"tile": "TILE=128"}, text)
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - t0 < 20
    assert "own = 128\n" in out.read_text()


# ---- B-TOOLCHAIN at execution time: @pipelink_python's launcher, run here without Bazel ----------

def _launcher(tmp_path: Path, interpreter: str) -> Path:
    """The launcher as @pipelink_python writes it, with interpreter_path beside it, reached (as in
    an action's sandbox) through a symlink in another folder."""
    text = (RULES / "private" / "cuda_configure_files.bzl").read_text()
    body = re.search(r'PYTHON_LAUNCHER = """(.*?)"""', text, re.S).group(1)
    repo, sandbox = tmp_path / "repo", tmp_path / "sandbox"
    repo.mkdir()
    sandbox.mkdir()
    (repo / "python").write_text(body)
    (repo / "python").chmod(0o755)
    (repo / "interpreter_path").write_text(interpreter + "\n")
    (sandbox / "python").symlink_to(repo / "python")
    return sandbox / "python"


def test_launcher_runs_the_interpreter_its_file_names(tmp_path):
    import sys
    res = subprocess.run([str(_launcher(tmp_path, sys.executable)), "-c", "import sys; print(sys.argv[1:])", "a b"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and res.stdout.strip() == "['a b']", res.stderr


def test_launcher_of_a_removed_interpreter_is_b_toolchain(tmp_path):
    res = subprocess.run([str(_launcher(tmp_path, str(tmp_path / "gone" / ".venv" / "bin" / "python"))), "-c", "1"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert res.stderr.startswith("pipelink B-TOOLCHAIN: the linker's interpreter ") and " hint: " in res.stderr
    assert "tools/setup.sh" in res.stderr
