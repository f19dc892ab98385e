"""Link pass: check -> solve -> generate -> compile generated code -> nvJitLink.

Produces the cubin, a manifest (what the runtime needs to launch it), a report
(placement table, solver status, timings, register read-back) and a placement map, and
optionally the control: the same sources and generated code compiled as ONE translation
unit, for a SASS comparison. Outputs are written only when everything succeeded.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipelink.common.diagnostics import Fact, Rejected, reject
from pipelink.common.host_binding import binding_digest, sha256_hex
from pipelink.common.manifest_schema import MANIFEST_FORMAT
from pipelink.linker.check import check
from pipelink.linker.check_types import Checked
from pipelink.linker.compose import Composition
from pipelink.linker.control import build_control
from pipelink.linker.generate import generate, param_layout, ws_param
from pipelink.linker.guard import generate_guarded, with_red_zones
from pipelink.linker.linked_checks import check_linked
from pipelink.linker.outputs import write_all
from pipelink.linker.scratch import scratch_dir, scratch_file
from pipelink.linker.solve import Placement, first_fit, solve
from pipelink.linker.toolkit import (INCLUDE_DIR, Toolkit, find_toolkit, gencode, lto_link_options, nvjitlink_link,
                                     run_tool)


@dataclass
class LinkResult:
    checked: Checked
    placement: Placement
    source: str
    cubin: bytes
    manifest: dict
    report: dict
    map_text: str
    control_cubin: bytes | None = None
    timings: dict[str, float] = field(default_factory=dict)
    control_error: Rejected | None = None  # the control failed; the linked outputs are still good
    warnings: list = field(default_factory=list)  # Diagnostics with severity "warning"


def _generate(ch: Checked, pl: Placement, guard: bool) -> str:
    if not guard:
        return generate(ch, pl)
    return generate_guarded(ch, pl)


def plan(comp: Composition, *, guard: bool = False) -> tuple[Checked, Placement, str, dict[str, float]]:
    """The CPU-only part of a link: check + solve + generate (what link speed measures)."""
    t = {}
    t0 = time.perf_counter()
    ch = check(comp)
    if guard:
        ch = with_red_zones(ch)
    t["check"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pl = solve(ch)
    t["solve"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    src = _generate(ch, pl, guard)
    t["generate"] = time.perf_counter() - t0
    return ch, pl, src, t


RESERVED_SMEM = 1024  # sm_90+: the system's per-block reservation, counted in cuobjdump's SHARED


def link(comp: Composition, *, control: bool = False, cuda_home: str | None = None, guard: bool = False,
         spills: str = "error") -> LinkResult:
    """guard: instrument the kernel (see guard.py); spills: "error" or "warning" for local memory."""
    tk = find_toolkit(cuda_home)
    if guard:
        spills = "warning"  # the guard's printf needs a stack frame: expected, not a spill
    ch, pl, src, timings = plan(comp, guard=guard)
    res = _link_once(comp, ch, pl, src, timings, control, tk, spills)
    # Read back what the linked code really uses. Static shared memory the trial compile
    # could not see (e.g. from inlined library code) shrinks the dynamic window: re-solve once.
    static = max(0, res.report["resource_usage"].get("SHARED", 0) - RESERVED_SMEM)
    if static > ch.static_smem and pl.dynamic_smem + -(-static // 1024) * 1024 > ch.capacity:
        ch = replace(ch, static_smem=static)
        pl = solve(ch)
        src = _generate(ch, pl, guard)
        res = _link_once(comp, ch, pl, src, timings, control, tk, spills)
        if pl.dynamic_smem + -(-static // 1024) * 1024 > ch.capacity:
            raise reject("L-SMEM", f"after linking, {static} B static + {pl.dynamic_smem} B dynamic shared memory exceed {ch.capacity} B",
                         hint="reduce static __shared__ in the components")
    return res


def _link_once(comp, ch, pl, src, timings, control, tk, spills="error") -> LinkResult:
    arch = comp.arch
    control_error = None
    with scratch_dir("link") as tmp:
        # Fixed names: a kernel name may be long enough to make "<name>.pipelink.cu" exceed NAME_MAX.
        gen = Path(tmp) / "generated.cu"
        gen.write_text(src)
        obj = Path(tmp) / "generated.o"
        t0 = time.perf_counter()
        run_tool(tk.nvcc_base() + ["-dc", "-std=c++17", "-O3", gencode(arch, "lto"), f"-I{INCLUDE_DIR}",
                                   str(gen), "-o", str(obj)], "L-COMPILE", "compiling the generated dispatcher")
        timings["compile_generated"] = time.perf_counter() - t0
        inputs = []
        for pkg in comp.packages():
            inputs += [(f"{pkg.name}/{k}", v) for k, v in sorted(pkg.objects.items())]
        inputs.append((obj.name, obj.read_bytes()))
        t0 = time.perf_counter()
        cubin = nvjitlink_link(inputs, lto_link_options(arch, comp.name))
        timings["nvjitlink"] = time.perf_counter() - t0
        control_cubin = None
        if control:
            t0 = time.perf_counter()
            try:
                control_cubin = build_control(comp, src, tk, Path(tmp))
            except Rejected as e:  # the control is a check of the link, not part of it: keep the cubin
                control_error = e
            timings["control"] = time.perf_counter() - t0
    usage = resource_usage(cubin, comp.name, tk)
    warnings = check_linked(ch, pl, cubin, usage, tk, spills=spills)
    granted = usage.get("REG", 0) * pl.threads
    asked = 128 * sum(pl.group_budgets)
    if pl.uses_setmaxnreg and granted and asked > granted:
        # setmaxnreg.inc would wait forever for registers no warp released.
        raise reject("L-REGS", f"the register budgets need {asked} registers but the linked block gets {granted} "
                               f"({usage.get('REG')} per thread x {pl.threads} threads)",
                     facts=[Fact(r.inst.name, f"budget {pl.budgets[r.inst.name]} x {r.warps} warps",
                                 str(r.inst.contract.role.origin)) for r in ch.roles],
                     hint="lower a role's maximum registers (regs = [min, max])")
    manifest = make_manifest(ch, pl, usage, cubin, control_cubin)
    report = make_report(ch, pl, usage, timings)
    return LinkResult(ch, pl, src, cubin, manifest, report, make_map(ch, pl, usage), control_cubin, timings,
                      control_error, warnings)


_RES = re.compile(r"Function (\w+):\s*(.*)")


def resource_usage(cubin: bytes, kernel: str, tk: Toolkit) -> dict[str, int]:
    with scratch_file("res", "linked.cubin", cubin) as f:
        text = run_tool([tk.tool("cuobjdump"), "-res-usage", str(f)], "E-TOOLKIT", "cuobjdump -res-usage")
    for m in _RES.finditer(text):
        if m.group(1) == kernel:
            return {k: int(v) for k, v in re.findall(r"(\w+):(\d+)", m.group(2))}
    return {}


def make_manifest(ch: Checked, pl: Placement, usage: dict, cubin: bytes, control_cubin: bytes | None = None) -> dict:
    layout = param_layout(ch)
    comp = ch.comp
    host = [{"instance": i.name, "package": i.package.name, "package_digest": i.package.digest(), "provider": h.provider,
             "source": i.package.host[h.provider].decode("utf-8"), "source_sha256": sha256_hex(i.package.host[h.provider]),
             "fills": list(h.fills), "reads": list(h.reads), "facts": list(h.facts)}
            for i in comp.instances if (h := i.contract.host)]
    manifest = {
        "format": MANIFEST_FORMAT,
        "kernel": comp.name,
        "entry": comp.name,
        "arch": comp.arch,
        "block": [pl.threads, 1, 1],
        "cluster": list(comp.cluster),
        "grid": [str(g) for g in comp.grid],
        "dynamic_smem": pl.dynamic_smem,
        "static_smem": ch.static_smem,
        "registers": usage.get("REG", 0),
        "params": {
            "size": layout.size,
            "by_name": dict(sorted({**ch.params, **{f.name: f.type for f in layout.fields
                                                     if f.name.startswith("@ws:")}}.items())),
            "fields": [{"instance": f.instance, "name": f.name, "type": f.type, "offset": f.offset}
                       for f in layout.fields],
        },
        "facts": dict(sorted(ch.facts.items())),
        "instances": [{"name": i.name, "package": i.package.name, "package_digest": i.package.digest()}
                      for i in comp.instances],
        "workspaces": [{"param": ws_param(i.name, w.name), "instance": i.name, "name": w.name,
                        "bytes": str(w.bytes), "zero": w.zero, "align": w.align,
                        **({"scope": w.scope} if w.scope != "instance" else {})}
                       for i in comp.instances for w in i.contract.workspaces],
        "host": host,
        # Instances that wait for other CTAs: the runtime refuses a grid larger than what fits (R-GRID).
        **({"co_resident": co} if (co := [i.name for i in comp.instances if i.contract.co_resident]) else {}),
    }
    if host:  # provider code is bound to its packages and this cubin: the runtime checks it before running any
        cubins = [sha256_hex(cubin)] + ([sha256_hex(control_cubin)] if control_cubin is not None else [])
        manifest["host_binding"] = {"cubin_sha256": cubins, "digest": binding_digest(
            cubins, [(h["instance"], h["package"], h["package_digest"], h["provider"], h["source_sha256"]) for h in host])}
    return manifest


def make_report(ch: Checked, pl: Placement, usage: dict, timings: dict) -> dict:
    ff = first_fit(ch, pl.depths)
    return {
        "kernel": ch.comp.name,
        "solver": {"proven_optimal": pl.proven_optimal, "status": pl.solver_status,
                   "smem_lower_bound": pl.smem_lower_bound, "objectives": pl.objectives,
                   "first_fit_footprint": ff, "solver_footprint": pl.dynamic_smem},
        "smem": [{"claim": k, "offset": pl.offsets[k], "bytes": pl.sizes[k]} for k in sorted(pl.offsets, key=pl.offsets.get)],
        "rings": {r.name: {"depth": pl.depths[r.name], "range": list(r.depth), "stage_bytes": r.stage_bytes,
                           "producer": r.producer.name, "consumer": r.consumer.name} for r in ch.rings},
        "barriers": dict(sorted(pl.barrier_ids.items(), key=lambda kv: kv[1])),
        "roles": {r.inst.name: {"warps": [pl.warp_begin[r.inst.name], pl.warp_begin[r.inst.name] + r.warps - 1],
                                "budget": pl.budgets[r.inst.name], "trial_registers": r.measured_regs}
                  for r in ch.roles},
        "warp_group_budgets": pl.group_budgets,
        "setmaxnreg": pl.uses_setmaxnreg,
        "entry_registers": pl.entry_regs,
        "resource_usage": usage,
        "transfers": [{"export": t.key, "import": f"{t.importer.name}.{t.imp.name}", "kind": t.kind}
                      for t in ch.transfers],
        "timings_s": {k: round(v, 4) for k, v in timings.items()},
    }


def make_map(ch: Checked, pl: Placement, usage: dict) -> str:
    comp = ch.comp
    lines = [f"kernel {comp.name} ({comp.arch}): {pl.threads} threads, {pl.dynamic_smem} B dynamic shared memory "
             f"(+{ch.static_smem} B static), solver {'proven optimal' if pl.proven_optimal else 'NOT proven optimal'}",
             f"solver: {pl.solver_status}", "", "shared memory:"]
    for k in sorted(pl.offsets, key=lambda k: (pl.offsets[k], k)):
        lines.append(f"  [{pl.offsets[k]:>7} .. {pl.offsets[k] + pl.sizes[k]:>7})  {k}")
    if ch.rings:
        lines += ["", "rings:"] + [f"  {r.name}: depth {pl.depths[r.name]} (range {r.depth[0]}..{r.depth[1]}), "
                                   f"{r.stage_bytes} B/stage, {r.producer.name} -> {r.consumer.name}" for r in ch.rings]
    if pl.barrier_ids:
        lines += ["", "named barriers:"] + [f"  id {v:>2}: {k}" for k, v in sorted(pl.barrier_ids.items(), key=lambda kv: kv[1])]
    lines += ["", "warps:"]
    for r in sorted(ch.roles, key=lambda r: pl.warp_begin[r.inst.name]):
        b = pl.warp_begin[r.inst.name]
        lines.append(f"  {b:>2}..{b + r.warps - 1:<2} {r.inst.name} ({r.inst.package.name}), {pl.budgets[r.inst.name]} registers")
    if ch.facts:
        lines += ["", "facts:"] + [f"  {k} = {v} (owner {ch.fact_owner[k].name if ch.fact_owner[k] else 'kernel'})" for k, v in sorted(ch.facts.items())]
    lines += ["", "registers at entry: " + str(usage.get("REG", "?"))]
    return "\n".join(lines) + "\n"


def write_outputs(res: LinkResult, *, cubin: str, manifest: str, report: str | None = None,
                  map_path: str | None = None, control: str | None = None, source: str | None = None,
                  inputs: list[str] = (), placement: str | None = None, labels: dict | None = None) -> None:
    """All outputs or none (outputs.write_all). A failed control is left out: the linked
    outputs are good without it, and an earlier control file is not touched."""
    items = [("--cubin", cubin, res.cubin),
             ("--manifest", manifest, (json.dumps(res.manifest, indent=2, sort_keys=True) + "\n").encode())]
    if report:
        stable = dict(res.report)
        stable.pop("timings_s", None)  # timings vary; keep the report bit-identical across builds
        items.append(("--report", report, (json.dumps(stable, indent=2, sort_keys=True) + "\n").encode()))
    if map_path:
        items.append(("--map", map_path, res.map_text.encode()))
    if control and res.control_cubin is not None:
        items.append(("--control-cubin", control, res.control_cubin))
    if source:
        items.append(("--source-out", source, res.source.encode()))
    if placement:  # labels: the --origin table, so each contract clause also names its owner
        from pipelink.linker.placement import make_placement, placement_bytes

        usage = res.report["resource_usage"]
        items.append(("--placement", placement, placement_bytes(make_placement(res.checked, res.placement, usage, labels))))
    write_all([(p, d) for _, p, d in items], flags=[f for f, _, _ in items], inputs=list(inputs))
