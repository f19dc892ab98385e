"""A seeded, bounded slice of tests/fuzz/cli.py (issue 11): malformed contracts, kernel
files, packages, paths and argument lists through the CLI; no E-INTERNAL, no crash, no partial
output, every rejection coded, nothing built to be invalid accepted.

Deterministic (fixed seed, fixed case count) and under 2 minutes on a 2-core machine: the
toy's objects and packages come from the session fixtures and pack's trial measurement is
memoized. The second slice damages the real kernels' contracts and kernel files
(tests/fuzz/corpora.py: moe_step, attention prefill/decode/context-parallel, the 2-CTA
GEMM) with their built packages from bazel-bin (skipped when they are not built), through
`plan`, with a real link now and then. The long run (10,000+ cases) is
`python -m fuzz.cli --cases 10000` (BENCHMARKS.md).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from conftest import ROOT
from fuzz import cli as fuzz_cli
from fuzz import corpora as fuzz_corpora
from fuzz import manifest as fuzz_manifest

CASES = 220  # about 40 s on an idle 2-core machine, 70 s on a loaded one
SEED = 11
REAL_CASES = 600  # about 30 s on a loaded 2-core machine (plan, and a few real links of attention or GEMM)
REAL_SEED = 5


def _run(fz, cases: int, seed: int) -> tuple[dict, float]:
    """`cases` seeded cases; fails with the first failures' inputs. -> (summary, seconds)."""
    rng = random.Random(seed)
    t0 = time.time()
    for n in range(cases):
        fz.case(n, rng)
    s = fz.summary()
    assert fz.ok, "\n\n".join(fz.failures[:5]) + f"\n{s}"
    return s, time.time() - t0


def test_fuzz_cli_seeded(tmp_path, packer, toy):
    packages = {n: packer.save(getattr(toy, n)) for n in fuzz_cli.NAMES}
    fz = fuzz_cli.Fuzzer(tmp_path / "cases", dict(toy.objects), packages, link_every=100, verbose=False)
    s, took = _run(fz, CASES, SEED)
    assert s["counts"]["cases"] == CASES
    print(f"{CASES} fuzz cases in {took:.0f} s: {s['counts']}")
    assert len(s["kinds"]) == 6  # every family of damage was exercised
    assert s["codes"].get("ok", 0) > 0 and len(s["codes"]) > 8  # both accepted and many kinds of rejection


def test_fuzz_real_corpora_seeded(tmp_path):
    corpora = fuzz_corpora.load_corpora(Path(os.environ.get("PIPELINK_FUZZ_BIN", ROOT / "bazel-bin" / "kernels")), tmp_path)
    if not corpora:
        pytest.skip("no real kernel's packages in bazel-bin: tools/bazel build //kernels:moe_step "
                    "//kernels/attention:attn_causal //kernels/attention:attn_decode")
    fz = fuzz_cli.Fuzzer(tmp_path / "cases", {}, {}, corpora=corpora, real_share=1.0, real_link_rate=0.006,
                         verbose=False)
    s, took = _run(fz, REAL_CASES, REAL_SEED)
    print(f"{REAL_CASES} real-kernel fuzz cases ({sorted(corpora)}) in {took:.0f} s: {s['counts']}")
    assert set(s["kinds"]) == {"real_contract", "real_kernel"}
    # check, solve and the kernel-file rules were all reached, and valid variants were accepted
    assert s["codes"].get("ok", 0) > 0 and len([c for c in s["codes"] if c.startswith("L-")]) >= 8


# ---- the runtime's side: a damaged manifest read back and planned (tests/fuzz/manifest.py) ----

def test_fuzz_manifest_slice():
    """3,000 damaged manifests of the built kernels through Manifest.from_dict and plan_launch
    (no GPU): each plans or is refused with a code and a hint (R-MANIFEST, R-PARAM, R-HOST, ...)."""
    if not (ROOT / "bazel-bin" / "examples" / "toy" / "toy.manifest.json").exists():
        pytest.skip("no manifests in bazel-bin (tools/bazel build //...)")
    res = fuzz_manifest.run(3000, 21, ROOT / "bazel-bin")
    assert res["counts"]["refused_reading"] and res["counts"]["planned"], res["counts"]
    assert not res["failures"], "\n".join(f"{f['manifest']} ({f['stage']}): {f['what']}" for f in res["failures"])
