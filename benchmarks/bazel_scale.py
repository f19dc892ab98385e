"""Monorepo-scale Bazel benchmark: a generated workspace of fused kernels over many components.

    .venv/bin/python benchmarks/bazel_scale.py                     # 40 components, 20 kernels
    .venv/bin/python benchmarks/bazel_scale.py --components 6 --kernels 3 --out DIR
    .venv/bin/python benchmarks/bazel_scale.py --generate-only --out DIR   # the workspace; no build

Generates a workspace that depends on this checkout (local_path_override; toolchains found
by the extension's defaults): `owners` components that each own the fact `width`
(own<i>, -DOWN_WIDTH) and the rest readers of it (rd<j>), each reader with its own source;
kernel k<m> links one owner (m mod owners) and `--readers-per-kernel` readers. Then, with one
Bazel server and output base, it measures (wall time of the `bazel build` client, and the
compile/pack/link actions that ran, from --execution_log_json_file):

  server_and_analysis  `build --nobuild` on a fresh output base (server start, toolchain
                       repositories, loading and analysis)
  cold                 the first full build
  noop                 the same build again
  edit_one_component   one reader's source edited
  fact_change          owner own0's fact (contract `own` + its -D define) changed

and writes <out>/results.json plus a Markdown table on stdout. No disk or remote cache.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from pipelink.linker.execlog import read_spawns  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
COUNTED = ("CudaCompile", "PipelinkPack", "PipelinkLink")

PARAMS_H = """\
// Host parameters of the generated components (every contract lists them in this order).
#pragma once
struct ScaleParams {
  float* out;   // [gridDim.x * 8] results
  unsigned n;   // blocks
};
"""

OWNER_CU = """\
// Generated owner {name}: owns `width` (-DOWN_WIDTH), fills a shared buffer, writes its sum.
#define PL_COMPONENT {name}
#include <pipelink.h>
#include "scale_params.h"

#ifndef OWN_WIDTH
#error "build with -DOWN_WIDTH=<the contract's fact.width.own>"
#endif
PL_OWN_FACT(width, OWN_WIDTH);
PL_DECLARE_SMEM(buf);
PL_DECLARE_BARRIER(done);

PL_ENTRY(run) {{
  const ScaleParams& p = PL_PARAMS(ScaleParams);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN());
  float* buf = reinterpret_cast<float*>(PL_SMEM_PTR(buf));
  for (unsigned i = t; i < OWN_WIDTH; i += 32 * PL_WARPS()) buf[i] = float(i) + {seed}.0f;
  pl::named_barrier_sync(PL_BARRIER(done), 32 * PL_WARPS());
  if (t == 0) {{
    float s = 0.0f;
    for (unsigned i = 0; i < OWN_WIDTH; ++i) s += buf[i];
    p.out[blockIdx.x * 8 + 0] = s;
  }}
}}
"""

READER_CU = """\
// Generated reader {name}: reads `width`, stages it in shared memory, writes a scaled sum.
#define PL_COMPONENT {name}
#include <pipelink.h>
#include "scale_params.h"

PL_DECLARE_FACT(width);
PL_DECLARE_SMEM(tmp);
PL_DECLARE_BARRIER(ready);

PL_ENTRY(run) {{
  const ScaleParams& p = PL_PARAMS(ScaleParams);
  const unsigned t = pl::role_thread(PL_WARP_BEGIN()), width = PL_FACT(width);
  float* tmp = reinterpret_cast<float*>(PL_SMEM_PTR(tmp));
  for (unsigned i = t; i < width; i += 32 * PL_WARPS()) tmp[i] = {scale}.0f * float(i);
  pl::named_barrier_sync(PL_BARRIER(ready), 32 * PL_WARPS());
  if (t == 0) {{
    float s = 0.0f;
    for (unsigned i = 0; i < width; ++i) s += tmp[i];
    p.out[blockIdx.x * 8 + 1 + (threadIdx.x / 32) % 7] = s;
  }}
}}
"""

CONTRACT_HEAD = """\
[component]
name = "{name}"
kind = "role"
entry = "run"
arch = "sm_90a"

[params]
out = "ptr"
n = "u32"

[role]
warps = 1
regs = [24, 64]
"""

OWNER_TAIL = """
[fact.width]
type = "u32"
own = {width}

[smem.buf]
bytes = "width * 4"
align = 16

[barrier.done]
threads = "role"
"""

READER_TAIL = """
[fact.width]
type = "u32"
accept = { min = 32, max = 1024, multiple_of = 32 }

[smem.tmp]
bytes = "width * 4"
align = 16

[barrier.ready]
threads = "role"
"""


def layout(components: int, kernels: int, owners: int, per_kernel: int) -> dict[str, list[str]]:
    """kernel name -> [owner, reader, ...]; readers spread round-robin over the kernels."""
    readers = [f"rd{j}" for j in range(components - owners)]
    out, r = {}, 0
    for m in range(kernels):
        chosen: list[str] = []
        while len(chosen) < min(per_kernel, len(readers)):
            name = readers[r % len(readers)]
            r += 1
            if name not in chosen:
                chosen.append(name)
        out[f"k{m}"] = [f"own{m % owners}"] + chosen
    return out


def generate(ws: Path, components: int, kernels: int, owners: int, per_kernel: int) -> dict[str, list[str]]:
    if ws.exists():
        shutil.rmtree(ws)
    (ws / "c").mkdir(parents=True)
    kmap = layout(components, kernels, owners, per_kernel)
    (ws / "MODULE.bazel").write_text(
        'module(name = "pipelink_scale")\n\nbazel_dep(name = "pipelink")\n'
        f'local_path_override(\n    module_name = "pipelink",\n    path = "{REPO}",\n)\n')
    (ws / ".bazelrc").write_text("build --incompatible_strict_action_env\n")
    (ws / "c" / "scale_params.h").write_text(PARAMS_H)
    build = ['load("@pipelink//pipelink_rules:defs.bzl", "cuda_component", "fused_kernel")\n']
    for i in range(owners):
        name, width = f"own{i}", 64 * (i + 1)
        (ws / "c" / f"{name}.cu").write_text(OWNER_CU.format(name=name, seed=i + 1))
        (ws / "c" / f"{name}.contract.toml").write_text(CONTRACT_HEAD.format(name=name) + OWNER_TAIL.format(width=width))
        build.append(f'cuda_component(\n    name = "{name}",\n    srcs = ["c/{name}.cu"],\n    hdrs = ["c/scale_params.h"],\n'
                     f'    contract = "c/{name}.contract.toml",\n    defines = ["OWN_WIDTH={width}"],\n)\n')
    for j in range(components - owners):
        name = f"rd{j}"
        (ws / "c" / f"{name}.cu").write_text(READER_CU.format(name=name, scale=j + 2))
        (ws / "c" / f"{name}.contract.toml").write_text(CONTRACT_HEAD.format(name=name) + READER_TAIL)
        build.append(f'cuda_component(\n    name = "{name}",\n    srcs = ["c/{name}.cu"],\n    hdrs = ["c/scale_params.h"],\n'
                     f'    contract = "c/{name}.contract.toml",\n)\n')
    for k, comps in kmap.items():
        toml = [f'[kernel]\nname = "{k}"\narch = "sm_90a"\ngrid = ["n", 1, 1]\n']
        toml += [f'[[instance]]\nname = "{c}_0"\npackage = "{c}"\n' for c in comps]
        (ws / "c" / f"{k}.kernel.toml").write_text("\n".join(toml))
        deps = ", ".join(f'":{c}"' for c in comps)
        build.append(f'fused_kernel(\n    name = "{k}",\n    components = [{deps}],\n    kernel = "c/{k}.kernel.toml",\n)\n')
    (ws / "BUILD.bazel").write_text("\n".join(build))
    return kmap


def _spawns(path: Path) -> list[dict]:
    return read_spawns(path, missing_ok=True)


class Bench:
    def __init__(self, ws: Path, ob: Path, logs: Path, bazel: list[str]):
        self.ws, self.ob, self.logs, self.bazel_cmd = ws, ob, logs, bazel
        self.results: dict[str, dict] = {}

    def bazel(self, *args: str, log: str | None = None) -> float:
        cmd = self.bazel_cmd + [f"--output_base={self.ob}", args[0], "--color=no", "--curses=no"]
        if log:
            cmd.append(f"--execution_log_json_file={self.logs / (log + '.json')}")
        cmd += list(args[1:])
        t0 = time.monotonic()
        res = subprocess.run(cmd, cwd=self.ws, capture_output=True, text=True, timeout=3600)
        dt = time.monotonic() - t0
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-4000:]}")
        return round(dt, 2)

    def step(self, name: str, *args: str) -> dict:
        wall = self.bazel(*args, log=name)
        ran: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        spawns = _spawns(self.logs / (name + ".json"))
        for s in spawns:
            if s.get("cacheHit"):
                continue
            ran[s.get("mnemonic", "?")][s.get("targetLabel", "?")] += 1
        counts = {m: sum(ran[m].values()) for m in COUNTED}
        self.results[name] = {"wall_s": wall, "actions": counts, "spawns": len(spawns),
                              "targets": {m: sorted(ran[m]) for m in COUNTED if ran[m]}}
        return self.results[name]


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def run(out: Path, components: int, kernels: int, owners: int, per_kernel: int, jobs: int | None) -> dict:
    ws, ob, logs = out / "ws", out / "ob", out / "logs"
    bazel = [os.environ.get("PIPELINK_BAZEL") or str(REPO / "tools" / "bazel")]
    if ob.exists() and (ob / "server").exists() and ws.exists():
        subprocess.run(bazel + [f"--output_base={ob}", "shutdown"], cwd=ws, capture_output=True)
    for d in (ob, logs):
        if d.exists():
            subprocess.run(["chmod", "-R", "u+w", str(d)], check=False)
            shutil.rmtree(d)
    logs.mkdir(parents=True)
    kmap = generate(ws, components, kernels, owners, per_kernel)
    b = Bench(ws, ob, logs, bazel)
    flags = [f"--jobs={jobs}"] if jobs else []
    try:
        t0 = time.monotonic()
        b.bazel("build", "--nobuild", "//...")
        b.results["server_and_analysis"] = {"wall_s": round(time.monotonic() - t0, 2)}
        b.step("cold", "build", *flags, "//...")
        b.step("noop", "build", *flags, "//...")
        edit(ws / "c" / "rd0.cu", "float(i);", "float(i) + 1.0f;")
        b.step("edit_one_component", "build", *flags, "//...")
        edit(ws / "c" / "own0.contract.toml", "own = 64", "own = 96")
        edit(ws / "BUILD.bazel", '"OWN_WIDTH=64"', '"OWN_WIDTH=96"')
        b.step("fact_change", "build", *flags, "//...")
    finally:
        subprocess.run(bazel + [f"--output_base={ob}", "shutdown"], cwd=ws, capture_output=True)
    users = collections.Counter(c for comps in kmap.values() for c in comps)
    summary = {
        "components": components, "kernels": kernels, "owners": owners, "readers_per_kernel": per_kernel,
        "expected": {
            "edit_one_component": {"CudaCompile": 1, "PipelinkPack": 1, "PipelinkLink": users["rd0"]},
            "fact_change": {"CudaCompile": 1, "PipelinkPack": 1, "PipelinkLink": users["own0"]},
        },
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "steps": b.results,
    }
    (out / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def table(summary: dict) -> str:
    rows = ["| step | wall (s) | compiles | packs | links |", "|---|---|---|---|---|"]
    for name, r in summary["steps"].items():
        a = r.get("actions", {})
        rows.append(f"| {name} | {r['wall_s']} | {a.get('CudaCompile', '')} | {a.get('PipelinkPack', '')} | "
                    f"{a.get('PipelinkLink', '')} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--components", type=int, default=40)
    ap.add_argument("--kernels", type=int, default=20)
    ap.add_argument("--owners", type=int, default=4)
    ap.add_argument("--readers-per-kernel", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--out", type=Path, default=REPO / ".pipelink" / "bench" / "scale")
    ap.add_argument("--generate-only", action="store_true",
                    help="write the workspace to <out>/ws and print its kernels' components as JSON; build nothing")
    args = ap.parse_args(argv)
    if args.owners < 1 or args.components <= args.owners:
        ap.error("need at least one owner and one reader")
    if args.generate_only:
        kmap = generate(args.out.resolve() / "ws", args.components, args.kernels, args.owners, args.readers_per_kernel)
        print(json.dumps(kmap))
        return 0
    summary = run(args.out.resolve(), args.components, args.kernels, args.owners, args.readers_per_kernel, args.jobs)
    print(table(summary))
    print(f"expected: {json.dumps(summary['expected'])}")
    print(f"results: {args.out / 'results.json'}")
    ok = all(summary["steps"][k]["actions"] == v for k, v in summary["expected"].items()) and \
        summary["steps"]["noop"]["spawns"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
