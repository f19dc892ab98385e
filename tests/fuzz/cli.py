#!/usr/bin/env python3
"""Fuzz the pipelink CLI with malformed inputs (issue 11) and count what must never happen.

    PYTHONPATH=tools:tests .venv/bin/python -m fuzz.cli --cases 10000 --seed 1

Each case damages one input of a command that works: a contract (packed, or injected into a
package so that `plan`/`link` read it), a kernel file, a package's bytes (zip headers,
compression, JSON types, contract.toml), an output or input path, or the argument list. The
command runs in-process (`pipelink.linker.cli.main`, fast); every `--link-every`-th case that reaches
a link runs `python -m pipelink link` in a subprocess, so a crash in native code (nvJitLink,
nvcc) is seen as a signal instead of killing the fuzzer. Counted per case:

- internal: exit 3 or an E-INTERNAL diagnostic;     - crash: killed by a signal;
- hang: over --timeout seconds (or an input FIFO);  - uncoded: a failure without a known code;
- partial: a `*.tmp` or staging folder left, a failed run that changed an earlier output,
  or a successful run without all its outputs;
- accepted: a case built to be invalid that exited 0;
- no_hint: a diagnostic without a hint (reported, not a failure).

The first failures are printed with their inputs (saved under --work). Exit 1 if any count
but no_hint is nonzero. tests/linker/test_fuzz.py runs a short seeded slice of this in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from pipelink.linker import cli
from pipelink.common.diagnostics import CODES

from fuzz import corpora as real_kernels
from fuzz.damage import JUNK, VALUES, damage_package, mutate_toml, rezip  # noqa: F401 - re-exported

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
TOY = ROOT / "examples" / "toy"

NAMES = ("producer", "consumer", "sink")
# Codes of a native step (nvcc, nvJitLink) refusing what every check accepted: not failures,
# but each one is a check that could have named the mistake earlier (reported as "notable").
NATIVE_CODES = {"L-LINK", "L-COMPILE", "P-COMPILE"}

# ---- running one case -----------------------------------------------------------------------------------

class Fuzzer:
    def __init__(self, work: Path, objects: dict[str, Path], packages: dict[str, Path], *, link_every: int = 40,
                 timeout: float = 300.0, verbose: bool = True, corpora: dict | None = None, real_share: float = 0.0,
                 real_link_rate: float = 0.0):
        self.work, self.objects, self.packages = work, objects, packages
        self.corpora, self.real_share, self.real_link_rate = corpora or {}, real_share, real_link_rate
        self.link_every, self.timeout, self.verbose = link_every, timeout, verbose
        self.counts: Counter = Counter()
        self.codes: Counter = Counter()
        self.failures: list[str] = []
        self.notable: list[str] = []  # inputs the checks passed but a native step refused: gaps in the checks
        self.linked = 0
        self._memoize_measure()

    @staticmethod
    def _memoize_measure():
        """Pack's trial measurement is a pure function of (trial source, arch, objects): cache it,
        so a contract case costs a parse + verify, not an nvcc run."""
        from pipelink.linker import package
        from pipelink.linker.trial import trial_source

        if getattr(package.measure, "fuzz_cached", False):
            return
        real, cache = package.measure, {}

        def measure(c, objects, tk):
            key = (trial_source(c), c.arch, tuple(sorted((k, hash(v)) for k, v in objects.items())))
            if key not in cache:
                cache[key] = real(c, objects, tk)
            return cache[key]

        measure.fuzz_cached = True
        package.measure = measure

    # -- one case: returns after checking every oracle
    def case(self, n: int, rng: random.Random) -> None:
        d = self.work / f"case{n}"
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        if self.corpora and rng.random() < self.real_share:  # fuzz/corpora.py: the real kernels

            kind = rng.choice(["real_contract", "real_contract", "real_contract", "real_kernel"])
            argv, outputs, must_fail = getattr(real_kernels, f"{kind}_case")(self, d, rng)
        else:
            kind = rng.choice(["contract", "contract", "injected", "injected", "kernel", "kernel", "package", "package",
                               "outputs", "argv"])
            argv, outputs, must_fail = getattr(self, f"_{kind}")(d, rng)
        sentinel = {}
        for p in outputs:
            if rng.random() < 0.5 and not os.path.exists(p) and "\0" not in str(p) and os.path.isdir(os.path.dirname(str(p)) or "."):
                try:
                    Path(p).write_bytes(b"earlier good output")
                    sentinel[str(p)] = True
                except OSError:
                    pass
        subprocess_link = argv[0] == "link" and (n % self.link_every == 0 or kind.startswith("real"))
        self._last_argv = argv
        rc, text = self._run(argv, subprocess_link)
        self.counts["cases"] += 1
        self.counts[f"kind.{kind}"] += 1
        problems = self._judge(rc, text, d, outputs, sentinel, must_fail)
        if problems:
            for p in problems:
                self.counts[p] += 1
            msg = f"case {n} ({kind}): {', '.join(problems)}: rc={rc} argv={argv!r}\n{text[-1500:]}"
            self.failures.append(msg)
            if self.verbose and len(self.failures) <= 10:
                print(msg, file=sys.stderr)
        else:
            shutil.rmtree(d, ignore_errors=True)

    def _run(self, argv: list[str], in_subprocess: bool) -> tuple[int, str]:
        argv = ["--format=json", *argv]
        if in_subprocess:
            self.linked += 1
            env = dict(os.environ, PYTHONPATH=str(TOOLS))
            try:
                p = subprocess.run([sys.executable, "-m", "pipelink", *argv], capture_output=True, timeout=self.timeout, env=env)
            except subprocess.TimeoutExpired:
                return -999, "timeout"
            except ValueError as e:  # a NUL in argv cannot even be passed to exec
                return 2, json.dumps({"ok": False, "diagnostics": [{"code": "E-USAGE", "hint": str(e)}]})
            return p.returncode, (p.stdout + p.stderr).decode(errors="replace")
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = cli.main(argv)
        except BaseException as e:  # noqa: BLE001 - cli.main must never raise
            return 3, f"raised {e.__class__.__name__}: {e}"
        return rc, out.getvalue() + err.getvalue()

    def _judge(self, rc, text, d: Path, outputs, sentinel, must_fail) -> list[str]:
        problems = []
        if rc == -999:
            return ["hang"]
        if rc < 0:
            problems.append("crash")
        if rc == 3 or (rc != 0 and '"E-INTERNAL"' in text):  # `explain` prints the code's meaning: not a failure
            problems.append("internal")
        left = [p for p in d.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".pl-")]
        left += [p for o in outputs if "\0" not in str(o) and os.path.isdir(os.path.dirname(str(o)) or ".")
                 for p in Path(os.path.dirname(str(o)) or ".").glob(".pl-*")]
        if left:
            problems.append("partial")
        if rc in (1, 2):
            try:
                doc = json.loads(text[text.index("{"):]) if "{" in text else {}
                diags = doc.get("diagnostics") or []
            except ValueError:
                diags = []
            if not diags or any(x.get("code") not in CODES for x in diags):
                problems.append("uncoded")
            if any(x.get("code") in NATIVE_CODES for x in diags):
                self.notable.append(f"{[x.get('code') for x in diags]}: {' '.join(map(repr, self._last_argv))}")
            for x in diags:
                self.codes[x.get("code")] += 1
                if not x.get("hint"):
                    self.counts["no_hint"] += 1
            control_only = diags and all(x.get("code") == "L-CONTROL" for x in diags)
            if not control_only:
                for p in outputs:
                    sp = str(p)
                    if sentinel.get(sp) and Path(sp).read_bytes() != b"earlier good output":
                        problems.append("partial")
                    if not sentinel.get(sp) and "\0" not in sp and os.path.isfile(sp) and d in Path(sp).parents:
                        problems.append("partial")
        elif rc == 0:
            self.codes["ok"] += 1
            if must_fail:
                problems.append("accepted")
            if any("\0" not in str(p) and not os.path.isfile(str(p)) for p in outputs):
                problems.append("partial")
        return sorted(set(problems))

    # -- case builders: (argv, output paths, surely invalid)
    def _pkgs(self, skip: str | None = None) -> list[str]:
        return [a for n in NAMES if n != skip for a in ("--package", str(self.packages[n]))]

    def _contract(self, d: Path, rng):
        name = rng.choice(NAMES)
        data, bad = mutate_toml((TOY / f"{name}.contract.toml").read_text(), rng)
        c = d / f"{name}.contract.toml"
        c.write_bytes(data)
        out = d / "out" / f"{name}.plpkg"
        return ["pack", "--contract", str(c), "--object", str(self.objects[name]), "--out", str(out)], [out], bad

    def _injected(self, d: Path, rng):
        """A damaged contract inside an otherwise good package: plan or link must judge it."""
        name = rng.choice(NAMES)
        data, bad = mutate_toml((TOY / f"{name}.contract.toml").read_text(), rng)
        p = d / f"{name}.plpkg"
        p.write_bytes(rezip(self.packages[name].read_bytes(), contract=data, forge=True))
        return self._plan_or_link(d, rng, [*self._pkgs(name), "--package", str(p)], str(TOY / "toy.kernel.toml"), bad)

    def _kernel(self, d: Path, rng):
        data, bad = mutate_toml((TOY / "toy.kernel.toml").read_text(), rng)
        k = d / "toy.kernel.toml"
        k.write_bytes(data)
        return self._plan_or_link(d, rng, self._pkgs(), str(k), bad)

    def _package(self, d: Path, rng):
        name = rng.choice(NAMES)
        p = d / f"{name}.plpkg"
        p.write_bytes(damage_package(self.packages[name].read_bytes(), rng))
        return self._plan_or_link(d, rng, [*self._pkgs(name), "--package", str(p)], str(TOY / "toy.kernel.toml"), False)

    def _plan_or_link(self, d: Path, rng, pkgs, kernel, bad):
        if rng.random() < 0.5:
            return ["plan", "--kernel", kernel, *pkgs], [], bad
        # Explicit paths: a damaged kernel file may rename the kernel, and --out-dir names files after it.
        outs = [d / "out" / f"k.{x}" for x in ("cubin", "manifest.json", "report.json", "map.txt")]
        flags = [x for f, p in zip(("--cubin", "--manifest", "--report", "--map"), outs) for x in (f, str(p))]
        return ["link", "--kernel", kernel, *pkgs, *flags], outs, bad

    def _outputs(self, d: Path, rng):
        (d / "afile").write_text("a file")
        (d / "adir").mkdir()
        obj = d / "producer.o"
        obj.write_bytes(self.objects["producer"].read_bytes())
        pkg = d / "sink.plpkg"  # an input of the link below: writing over it must be refused
        pkg.write_bytes(self.packages["sink"].read_bytes())
        os.mkfifo(d / "fifo")  # an existing FIFO: refused, never replaced (nor /dev/null: not tried here)
        bad_paths = [d / "adir", d / "afile" / "x", d / ("n" * 300), None, f"{d}/x\0y", "", d / "adir" / "",
                     d / "a" / ("m" * 256) / "x", d / "fifo"]
        target = rng.choice(bad_paths)
        if rng.random() < 0.5:
            return ["pack", "--contract", str(TOY / "producer.contract.toml"), "--object", str(obj),
                    "--out", str(obj if target is None else target)], [], True
        target = pkg if target is None else target
        flag = rng.choice(["--cubin", "--manifest", "--report", "--map", "--source-out", "--control-cubin"])
        args = {"--cubin": str(d / "k.cubin"), "--manifest": str(d / "k.json")}
        args[flag] = str(target)
        if rng.random() < 0.3:
            args["--manifest"] = args["--cubin"]
        outs = [Path(v) for v in args.values() if v != str(target)]
        return ["link", "--kernel", str(TOY / "toy.kernel.toml"), *self._pkgs("sink"), "--package", str(pkg),
                *[x for kv in args.items() for x in kv]], outs, True

    def _argv(self, d: Path, rng):
        base = rng.choice([["plan", "--kernel", str(TOY / "toy.kernel.toml"), *self._pkgs()],
                           ["explain", rng.choice(["L-BIND", "X-NOPE", "", "e-file"])],
                           ["sass-diff", str(self.packages["sink"]), str(self.packages["sink"])],
                           ["pack", "--contract", str(TOY / "sink.contract.toml"), "--object", str(self.objects["sink"])]])
        extra = rng.choice([[], ["--arch", ""], ["--arch", "sm_91"], ["--arch", "sm_100a"], ["--bogus"], ["--kernel"],
                            ["--package", str(d / "missing.plpkg")], ["--kernel", str(d)], ["--format"], ["--quiet"],
                            ["--origin", "x"], ["--cuda-home", str(d)], ["--cuda-home", "x\0y"], ["--kernel", "nope"],
                            ["--out", str(d)], ["--guard"], ["--spills", "warning"],
                            # not regular files: a FIFO blocked open() forever, /dev/zero never ended
                            ["--kernel", str(d / "fifo")], ["--package", str(d / "fifo")], ["--package", "/dev/zero"],
                            ["--kernel", "/dev/zero"]])
        if not (d / "fifo").exists():
            os.mkfifo(d / "fifo")
        argv = base + extra
        if rng.random() < 0.3 and len(argv) > 2:
            del argv[rng.randrange(1, len(argv))]
        return argv, [], False

    def summary(self) -> dict:
        keys = ["cases", "internal", "crash", "hang", "partial", "uncoded", "accepted", "no_hint"]
        return {"counts": {k: self.counts.get(k, 0) for k in keys},
                "kinds": {k[5:]: v for k, v in sorted(self.counts.items()) if k.startswith("kind.")},
                "subprocess_links": self.linked, "codes": dict(self.codes.most_common()),
                "notable": self.notable[:50]}

    @property
    def ok(self) -> bool:
        return not any(self.counts.get(k) for k in ("internal", "crash", "hang", "partial", "uncoded", "accepted"))


def build_toy(work: Path) -> tuple[dict[str, Path], dict[str, Path]]:
    """Compile and pack the toy's three components (the inputs every case damages)."""
    from pipelink.linker.package import pack
    from pipelink.linker.package_io import write_package
    from pipelink.linker.toolkit import find_toolkit

    tk = find_toolkit()
    objects, packages = {}, {}
    for n in NAMES:
        obj = work / f"{n}.o"
        subprocess.run(tk.nvcc_base() + ["-dc", "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=lto_90a",
                                         f"-I{TOOLS / 'pipelink' / 'include'}", str(TOY / f"{n}.cu"), "-o", str(obj)],
                       check=True)
        objects[n] = obj
        packages[n] = work / f"{n}.plpkg"
        write_package(pack(str(TOY / f"{n}.contract.toml"), [str(obj)]), str(packages[n]))
    return objects, packages


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--link-every", type=int, default=40, help="run every N-th link case in a subprocess")
    ap.add_argument("--work", help="keep the inputs of failing cases here (default: a temporary folder)")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--bin", default=str(ROOT / "bazel-bin" / "kernels"),
                    help="bazel-bin/kernels holding the real kernels' packages (tests/fuzz/corpora.py)")
    ap.add_argument("--real-share", type=float, default=0.6, help="share of cases that damage a real kernel's inputs")
    ap.add_argument("--real-link-rate", type=float, default=0.01,
                    help="share of real-kernel cases that run a real link (attention only; moe links are slow)")
    args = ap.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="pipelink-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    objects, packages = build_toy(work)
    corpora = real_kernels.load_corpora(Path(args.bin), work)
    print(f"real corpora: {sorted(corpora) or 'none (build them: see BENCHMARKS.md)'}", file=sys.stderr)
    fz = Fuzzer(work / "cases", objects, packages, link_every=args.link_every, corpora=corpora,
                real_share=args.real_share if corpora else 0.0, real_link_rate=args.real_link_rate)
    rng = random.Random(args.seed)
    for n in range(args.cases):
        fz.case(n, rng)
        if (n + 1) % 500 == 0:
            print(f"{n + 1} cases, {time.time() - t0:.0f} s: {fz.summary()['counts']}", file=sys.stderr, flush=True)
    s = fz.summary()
    s.update(seed=args.seed, seconds=round(time.time() - t0, 1))
    print(json.dumps(s, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(s, indent=2) + "\n")
    if not args.work and fz.ok:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if fz.ok else 1


if __name__ == "__main__":
    sys.exit(main())
