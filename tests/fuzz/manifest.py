"""Fuzz the runtime's reading of a manifest and its launch planning (CPU, no GPU, in-process).

A manifest travels beside its cubin and is read back by `pipelink.runtime` (Manifest.from_dict)
and planned for a launch (plan_launch: parameter coercion, grid, host providers, workspaces,
the packed parameter block). Each case damages a real kernel's manifest (from bazel-bin) at 1-3
random places: a value replaced by one from fuzz/damage.py's pools (any type) or by another of
its own type (`like`), a key dropped or added, a list entry duplicated. The runtime must then either plan the launch or refuse it with
a coded diagnostic that has a hint (R-MANIFEST, R-PARAM, R-GRID, R-HOST, R-WORKSPACE, ...);
any other exception is a failure. Host providers' own source is left intact (their damage is
fuzz/damage.py's, through pack).

    PYTHONPATH=tools:tests .venv/bin/python -m fuzz.manifest --cases 20000 --seed 3
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import traceback
from pathlib import Path

from pipelink.common.diagnostics import Rejected
from pipelink.runtime.host import HostEncoder
from pipelink.runtime.launch_plan import plan_launch
from pipelink.runtime.manifest import Manifest

from fuzz.damage import like, pool  # the CLI fuzzer's value pools

ROOT = Path(__file__).resolve().parents[2]

MANIFESTS = ["examples/toy/toy", "kernels/gemm_swiglu", "kernels/gemm_swiglu_tma", "kernels/gemm_swiglu_tma_c2",
             "kernels/moe_step", "kernels/attention/attn_causal", "kernels/attention/attn_decode",
             "kernels/attention/attn_cp"]
SCALARS = {"ptr": 0x7F0000100000, "u32": 128, "i32": 3, "u64": 5, "f32": 0.5}


class FakeHost(HostEncoder):
    """Tensor maps without a driver: the planner's contract with a provider, not the encoding."""

    def tensor_map_2d(self, ptr, dtype, **kw):
        return bytes([7]) * 128


def _paths(o, pre=()):
    yield pre
    items = o.items() if isinstance(o, dict) else enumerate(o) if isinstance(o, list) else ()
    for k, v in items:
        yield from _paths(v, pre + (k,))


def damage(d: dict, rng: random.Random) -> dict:
    d = copy.deepcopy(d)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        paths = [p for p in _paths(d) if p and not (p[0] == "host" and p[-1] == "source")]
        p = rng.choice(paths)
        parent = d
        for k in p[:-1]:
            parent = parent[k]
        op = rng.random()
        if op < 0.35:  # a value of any type
            parent[p[-1]] = copy.deepcopy(pool(rng))
        elif op < 0.6:  # another value of the same type: gets past the type checks into planning
            parent[p[-1]] = like(copy.deepcopy(parent[p[-1]]), rng, [])
        elif op < 0.8 and isinstance(parent, dict):
            del parent[p[-1]]
        elif isinstance(parent, dict):
            parent[rng.choice(["zz", "extra", f"{p[-1]}_"])] = copy.deepcopy(pool(rng))
        else:
            parent.append(copy.deepcopy(rng.choice(parent)))
    return d


def _launch_values(base: dict, rng: random.Random) -> dict:
    by_name = base.get("params", {}).get("by_name", {})
    vals = {n: SCALARS.get(t, 1) for n, t in by_name.items() if not n.startswith("@") and t != "tmap"}
    for n in vals:
        if by_name[n] == "u32" and rng.random() < 0.3:
            vals[n] = rng.choice([0, 1, 7, 2**32 - 1])
    return vals


def _coded(e: Rejected) -> bool:
    return all(d.code and d.hint for d in e.diagnostics)


def run(cases: int, seed: int, bin_dir: Path) -> dict:
    bases = [(n, json.loads((bin_dir / f"{n}.manifest.json").read_text())) for n in MANIFESTS
             if (bin_dir / f"{n}.manifest.json").exists()]
    if not bases:
        raise SystemExit(f"fuzz.manifest: no manifests under {bin_dir} (build them: tools/bazel build //...)")
    rng = random.Random(seed)
    counts = {"cases": 0, "refused_reading": 0, "planned": 0, "refused_planning": 0, "failures": 0}
    failures = []
    for i in range(cases):
        name, base = rng.choice(bases)
        d = damage(base, rng)
        counts["cases"] += 1
        stage = "reading"
        try:
            m = Manifest.from_dict(d, f"{name}.manifest.json")
            stage = "planning"
            plan_launch(m, _launch_values(base, rng), builtins={"num_sms": 132, "resident_ctas": 264},
                        host=FakeHost(), workspace=lambda w, n: 0x7F0000200000)
            counts["planned"] += 1
        except Rejected as e:  # LaunchError and HostError are Rejected
            counts[f"refused_{stage}"] += 1
            if not _coded(e):
                failures.append({"case": i, "manifest": name, "stage": stage, "what": f"no code/hint: {e}"})
        except Exception:  # noqa: BLE001 - what the fuzzer is for
            failures.append({"case": i, "manifest": name, "stage": stage, "what": traceback.format_exc(limit=3)})
    counts["failures"] = len(failures)
    return {"seed": seed, "counts": counts, "failures": failures[:20]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bin", type=Path, default=ROOT / "bazel-bin")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    res = run(a.cases, a.seed, a.bin)
    print(json.dumps(res["counts"]))
    for f in res["failures"]:
        print(f"---- case {f['case']} {f['manifest']} ({f['stage']})\n{f['what']}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1) + "\n")
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
