"""The placement of one linked kernel as data: what `pipelink link --placement` writes and what
`pipelink map` and `pipelink diff-map` read.

One JSON object (PLACEMENT_FORMAT) with every decision the link made about the SM: each shared-
memory claim (offset, size, phase), named barrier id, role (warps, setmaxnreg budget), ring
(depth, stage bytes) and workspace, each with its owner (instance and package), the contract
clause that asked for it (file:line, and the --origin label of that file when given) and why it
has its value: "fixed" (the contract leaves no choice), "chosen" (the solver picked it without
proving the placement optimal) or "proven optimal". Deterministic: no timings, sorted keys.
"""

from __future__ import annotations

import json

from pipelink.common.diagnostics import Fact, reject
from pipelink.common.files import display, read_text
from pipelink.linker.arch_limits import MAX_WARPS

PLACEMENT_FORMAT = 1
PLACEMENT_KIND = "pipelink.linker.placement"
FIXED, CHOSEN, PROVEN = "fixed", "chosen", "proven optimal"
KERNEL_PHASE = "kernel"  # a claim alive for the whole kernel meets every phase


def _origin(o, labels: dict[str, str]) -> dict:
    out = {"file": o.file, "line": o.line}
    if o.file in labels:
        out["label"] = labels[o.file]
    return out


def _owner(inst) -> dict:
    return {"instance": inst.name, "package": inst.package.name}


def solver_why(pl) -> str:
    """What the solver can say about its own choices: the single place to read its status."""
    return PROVEN if pl.proven_optimal else CHOSEN


def make_placement(ch, pl, usage: dict, labels: dict[str, str] | None = None) -> dict:
    """ch: check.Checked; pl: solve.Placement; usage: the linked cubin's resource usage."""
    labels = dict(labels or {})
    comp = ch.comp
    why = solver_why(pl)
    rings = {r.name: r for r in ch.rings}
    ring_sides = {}
    for r in ch.rings:
        sides = {}
        for inst in (r.producer, r.consumer):
            decl = next(s for s in inst.contract.rings if s.name == r.name)
            sides[decl.side] = (inst, decl)
        ring_sides[r.name] = sides
    transfers = {f"transfer.{t.key}": t for t in ch.transfers}

    def transfer_origins(t) -> list[dict]:
        return [_origin(t.export.origin, labels), _origin(t.imp.origin, labels)]

    claims = []
    for c in ch.claims:
        entry = {"key": c.key, "offset": pl.offsets[c.key], "bytes": pl.sizes[c.key], "align": c.align,
                 "phase": c.phase, "why": why}
        if c.ring:
            sides = ring_sides[c.ring]
            entry.update(kind="ring " + c.key.rsplit(".", 1)[1], ring=c.ring,
                         owner={"ring": c.ring, "producer": _owner(sides["producer"][0]),
                                "consumer": _owner(sides["consumer"][0])},
                         origins=[_origin(sides[s][1].origin, labels) for s in ("producer", "consumer")],
                         size="per ring depth")
        elif c.key in transfers:
            t = transfers[c.key]
            entry.update(kind="transfer", owner={"exporter": _owner(t.exporter), "importer": _owner(t.importer)},
                         origins=transfer_origins(t), size=FIXED)
        else:
            inst_name, _, name = c.key.partition(".smem.")
            inst = comp.instance(inst_name)
            decl = next((s for s in inst.contract.smem if s.name == name), None) if inst else None
            entry.update(kind="smem", owner=_owner(inst) if inst else {},
                         origins=[_origin(decl.origin, labels)] if decl else [], size=FIXED)
        claims.append(entry)

    barriers = []
    for b in ch.barriers:
        entry = {"key": b.key, "id": pl.barrier_ids[b.key], "threads": b.threads, "why": CHOSEN}
        if b.key in transfers:
            t = transfers[b.key]
            entry.update(owner={"exporter": _owner(t.exporter), "importer": _owner(t.importer)},
                         origins=transfer_origins(t))
        else:
            inst_name, _, name = b.key.partition(".")
            inst = comp.instance(inst_name)
            decl = next((d for d in inst.contract.barriers if d.name == name), None) if inst else None
            entry.update(owner=_owner(inst) if inst else {}, origins=[_origin(decl.origin, labels)] if decl else [])
        barriers.append(entry)

    roles = []
    for r in ch.roles:
        n = r.inst.name
        roles.append({"instance": n, "owner": _owner(r.inst), "warp_begin": pl.warp_begin[n], "warps": r.warps,
                      "warpgroup_aligned": r.aligned, "budget": pl.budgets[n], "regs": list(r.regs),
                      "trial_registers": r.measured_regs, "origins": [_origin(r.inst.contract.role.origin, labels)],
                      "why": FIXED if r.regs[0] == r.regs[1] else why, "warps_why": why})

    ring_list = []
    for name, r in rings.items():
        sides = ring_sides[name]
        ring_list.append({"name": name, "depth": pl.depths[name], "range": list(r.depth), "stage_bytes": r.stage_bytes,
                          "owner": {"producer": _owner(r.producer), "consumer": _owner(r.consumer)},
                          "origins": [_origin(sides[s][1].origin, labels) for s in ("producer", "consumer")],
                          "why": FIXED if r.depth[0] == r.depth[1] else why})

    workspaces = []
    for inst in comp.instances:
        for w in inst.contract.workspaces:
            workspaces.append({"key": f"{inst.name}.{w.name}", "name": w.name, "owner": _owner(inst),
                               "bytes": str(w.bytes), "zero": w.zero, "align": w.align, "scope": w.scope,
                               "origins": [_origin(w.origin, labels)], "why": FIXED})

    phases = sorted({c.phase for c in ch.claims} - {KERNEL_PHASE})
    return {
        "format": PLACEMENT_FORMAT,
        "kind": PLACEMENT_KIND,
        "kernel": comp.name,
        "arch": comp.arch,
        "threads": pl.threads,
        "warps": pl.warps,
        "dynamic_smem": pl.dynamic_smem,
        "static_smem": ch.static_smem,
        "smem_capacity": ch.capacity,
        "registers": usage.get("REG", 0),
        "entry_registers": pl.entry_regs,
        "setmaxnreg": pl.uses_setmaxnreg,
        "warp_group_budgets": list(pl.group_budgets),
        "solver": {"why": why, "proven_optimal": pl.proven_optimal, "objectives": dict(sorted(pl.objectives.items())),
                   "status": pl.solver_status, "smem_lower_bound": pl.smem_lower_bound},
        "phases": [KERNEL_PHASE] + phases,
        "claims": sorted(claims, key=lambda c: (c["offset"], c["key"])),
        "barriers": sorted(barriers, key=lambda b: b["id"]),
        "roles": sorted(roles, key=lambda r: r["warp_begin"]),
        "rings": ring_list,
        "workspaces": workspaces,
        "kernel_file": {"file": comp.file, **({"label": labels[comp.file]} if comp.file in labels else {})},
    }


def placement_bytes(placement: dict) -> bytes:
    return (json.dumps(placement, indent=2, sort_keys=True) + "\n").encode()


# ---- reading ---------------------------------------------------------------------------------------

_HINT = "give the <kernel>.placement.json that `pipelink link --placement` wrote (relink to refresh it)"
# What `map` and `diff-map` read, with the bounds a link can write: a file that passes renders
# (the pages loop over warps, barrier ids and ring stages, so an unbounded count would exhaust
# memory, and every name is escaped as a string). field -> {key: str or (min, max)} of each entry;
# every entry also has owner, origins and why.
_U32 = (0, 2**32 - 1)
_LISTS = {"claims": {"key": str, "offset": _U32, "bytes": _U32, "phase": str},
          "barriers": {"key": str, "id": (0, 15)},
          "roles": {"instance": str, "warp_begin": (0, MAX_WARPS - 1), "warps": (1, MAX_WARPS), "budget": (0, 256)},
          "rings": {"name": str, "depth": (1, 64), "stage_bytes": _U32},
          "workspaces": {"key": str, "bytes": object}}  # object: any JSON value (an expression)
_INTS = {"threads": (0, 32 * MAX_WARPS), "warps": (0, MAX_WARPS), "dynamic_smem": _U32}


def read_placement(path) -> dict:
    """A placement file, checked enough that rendering it cannot fail: E-FILE when it cannot be
    read, E-PLACEMENT when it is not a placement of this format (a field of another type, or a
    count beyond what a link writes)."""
    text = read_text(path, "placement", hint=_HINT)

    def bad(why: str):
        return reject("E-PLACEMENT", f"{display(path)}: {why}", facts=[Fact("placement", display(path))], hint=_HINT)

    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise bad(f"not JSON ({e.__class__.__name__})") from None
    if not isinstance(data, dict) or data.get("kind") != PLACEMENT_KIND:
        raise bad(f"not a pipelink placement (its \"kind\" is not {PLACEMENT_KIND!r}; a manifest or report is "
                  "not a placement)")
    if data.get("format") != PLACEMENT_FORMAT:
        raise bad(f"format {data.get('format')!r}; this pipelink reads format {PLACEMENT_FORMAT}")
    if not isinstance(data.get("kernel"), str):
        raise bad("\"kernel\" is not a string")
    for k, bounds in _INTS.items():
        why = _wrong(data.get(k), bounds)
        if why:
            raise bad(f"\"{k}\" {why}")
    if not isinstance(data.get("phases"), list) or not all(isinstance(p, str) for p in data["phases"]):
        raise bad("\"phases\" is not a list of strings")
    budgets = data.get("warp_group_budgets")
    if not isinstance(budgets, list) or len(budgets) > MAX_WARPS // 4 or any(_wrong(b, (0, 256)) for b in budgets):
        raise bad(f"\"warp_group_budgets\" is not a list of at most {MAX_WARPS // 4} register counts (0..256)")
    if not isinstance(data.get("solver", {}), dict):
        raise bad("\"solver\" is not an object")
    for field, keys in _LISTS.items():
        items = data.get(field)
        if not isinstance(items, list):
            raise bad(f"\"{field}\" is not a list")
        for n, item in enumerate(items):
            missing = [k for k in (*keys, "owner", "origins", "why") if not isinstance(item, dict) or k not in item]
            if missing:
                raise bad(f"{field}[{n}] lacks {', '.join(missing)}")
            for k, want in keys.items():
                if want is object:
                    continue
                why = ("is not a string" if not isinstance(item[k], str) else "") if want is str else _wrong(item[k], want)
                if why:
                    raise bad(f"{field}[{n}].{k} {why}")
            if not isinstance(item["origins"], list) or not all(
                    isinstance(o, dict) and isinstance(o.get("file"), str) and _is_int(o.get("line", 0))
                    and isinstance(o.get("label", ""), str) for o in item["origins"]):
                raise bad(f"{field}[{n}]: origins is not a list of {{file, line}}")
            if not _owner_ok(item["owner"]):
                raise bad(f"{field}[{n}]: owner is not an object of names (instance, package) or of such objects")
        extra = _entry_problem(field, items)
        if extra:
            raise bad(extra)
    return data


def _wrong(v, bounds: tuple[int, int]) -> str:
    """'' for an integer within bounds, else what is wrong with it."""
    if not _is_int(v):
        return "is not an integer"
    return "" if bounds[0] <= v <= bounds[1] else f"is {v}, outside {bounds[0]}..{bounds[1]}"


def _owner_ok(owner, depth: int = 0) -> bool:
    """{instance, package} names, or objects of such owners (a ring's producer and consumer)."""
    return isinstance(owner, dict) and depth < 3 and all(
        isinstance(v, str) if k in ("instance", "package") else isinstance(v, str) or _owner_ok(v, depth + 1)
        for k, v in owner.items())


def _entry_problem(field: str, items: list[dict]) -> str:
    """What the per-field schema cannot say: a ring's range, a role's warps within the block,
    a kernel-scope workspace's buffer name."""
    for n, item in enumerate(items):
        if field == "rings":
            r = item["range"] if "range" in item else None
            if not (isinstance(r, list) and len(r) == 2 and not any(_wrong(x, (1, 64)) for x in r)):
                return f"rings[{n}].range is not two depths 1..64"
        elif field == "roles" and item["warp_begin"] + item["warps"] > MAX_WARPS:
            return f"roles[{n}]: warps {item['warp_begin']}..{item['warp_begin'] + item['warps'] - 1} are past a block's {MAX_WARPS}"
        elif field == "workspaces" and ("name" in item or item.get("scope") == "kernel") and not isinstance(item.get("name"), str):
            return f"workspaces[{n}].name is not a string"
    return ""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def owner_text(owner: dict) -> str:
    """An owner as people read it: "ffn (moe_expert)", or both sides of a ring or transfer."""
    if "instance" in owner:
        return f"{owner['instance']} ({owner.get('package', '?')})"
    parts = [f"{k} {owner_text(v)}" for k, v in sorted(owner.items()) if isinstance(v, dict)]
    return ", ".join(parts) or "kernel"


def origin_text(o: dict) -> str:
    where = f"{o['file']}:{o['line']}" if o.get("line") else o["file"]
    return f"{where} [{o['label']}]" if o.get("label") else where
