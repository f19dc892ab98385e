"""Real-kernel corpora for fuzz/cli.py: clause-aware damage of the contracts and
kernel files of moe_step, attention (prefill, split-KV decode, context-parallel) and the
2-CTA-cluster GEMM, whose clauses the toy does not use: kernel-scope workspaces, co_resident
grids, host providers, callables, rings with expressions, tensors with layouts and scopes,
barriers, [[bind]], accept ranges, roles, peers/world parameters.

A contract is parsed (tomllib), one clause is damaged structurally (a value from a typed pool,
a key dropped or added, the table emptied, renamed to a name that does not exist or that
another clause uses, copied under another clause kind, an expression edited: unknown name,
division by zero, overflow, negative) and written back as TOML; it is injected into its built
package with the digests re-recorded, and the measured handles renamed with it, so the damage
reaches check/solve/generate instead of stopping at the package's re-verification. Kernel
files get the same treatment plus duplicated instances and [[bind]]s. Cases run through `plan`
in-process; every `link_every`-th case (and only the small kernels) runs a real link.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import tomllib
from pathlib import Path

from fuzz.damage import DICTS, HOST_SOURCES, INTS, LISTS, STRS, damage_expr, dumps, like, pool

ROOT = Path(__file__).resolve().parents[2]

# corpus -> (kernel file in the repository, or "bin:" + its path under bazel-bin/kernels, packages in
# bazel-bin/kernels, linked in a subprocess?). moe_step's model facts are appended by its target.
CORPORA = {
    "moe_step": ("bin:_pl_facts/moe_step/moe_step.kernel.toml",
                 ["moe_router", "moe_dispatch", "moe_expert", "moe_swiglu", "moe_combine"], False),
    "attn_causal": ("kernels/attention/attn_prefill.kernel.toml",
                    ["attention/attn_loader", "attention/attn_core", "attention/attn_causal_mask", "attention/attn_store"],
                    True),
    "attn_decode": ("kernels/attention/attn_decode.kernel.toml",
                    ["attention/attn_loader", "attention/attn_core", "attention/attn_decode_mask",
                     "attention/attn_combine"], True),
    "attn_cp": ("kernels/attention/attn_cp.kernel.toml",
                ["attention/attn_cp_loader", "attention/attn_core", "attention/attn_cp_causal_mask",
                 "attention/attn_store"], True),
    "gemm_c2": ("kernels/gemm_swiglu/gemm_swiglu_tma_c2.kernel.toml",
                ["tile_scheduler", "tma_loader", "gemm_swiglu_tma_c2_consumer", "swiglu_tma_store"], True),
}

# Handle kinds by clause (the measured symbol is pl_<component>__<kind>__<name>).
HANDLE_KINDS = {"smem": ["smem"], "barrier": ["bar"], "fact": ["fact", "own"], "export": ["export"],
                "import": ["import"], "workspace": ["ws"],
                "ring": ["ring_depth", "ring_buffer", "ring_full", "ring_empty"],
                "callable.export": ["callable"], "callable.import": ["call"]}
NAMED = ["fact", "smem", "barrier", "ring", "export", "import", "workspace", "callable.export", "callable.import"]

# ---- structural damage -------------------------------------------------------------------------------------

def clauses(d: dict) -> list[tuple[str, str | None, dict]]:
    """(kind, name, table) of every clause: [component], [params], [role], [host] and every named one."""
    out = [(k, None, d[k]) for k in ("component", "params", "role", "host") if isinstance(d.get(k), dict)]
    for kind in NAMED:
        t = d
        for p in kind.split("."):
            t = t.get(p, {}) if isinstance(t, dict) else {}
        if isinstance(t, dict):
            out += [(kind, n, v) for n, v in t.items() if isinstance(v, dict)]
    return out


def _kind_table(d: dict, kind: str) -> dict:
    t = d
    for p in kind.split("."):
        t = t.setdefault(p, {})
    return t


EXPR_KEYS = {"bytes", "stage_bytes", "arrivals", "peer_arrivals"}
FIXED_SCHEMA = {"component", "role", "host", "smem", "barrier", "ring", "export", "import", "workspace",
                "callable.export", "callable.import"}


def mutate_contract(text: str, rng: random.Random) -> tuple[str, bool, dict[str, str]]:
    """(damaged text, surely invalid, handle renames {old_name: new_name} to forge in the measurement)."""
    d = tomllib.loads(text)
    facts = [n for n in d.get("fact", {})]
    cl = clauses(d)
    kind, name, t = rng.choice(cl)
    op = rng.choice(["value", "value", "value", "expr", "expr", "drop", "unknown", "empty", "rename", "rename",
                     "copy", "host", "accept", "resource", "resource", "resource", "param"])
    bad, renames = False, {}
    keys = list(t)
    if op == "value" and keys:
        k = rng.choice(keys)
        t[k] = like(t[k], rng, facts) if rng.random() < 0.75 else pool(rng)
    elif op == "expr":
        exprs = [k for k in keys if k in EXPR_KEYS or k == "shape"]
        if not exprs:
            kind, name, t = rng.choice([c for c in cl if any(k in EXPR_KEYS or k == "shape" for k in c[2])] or [cl[0]])
            exprs = [k for k in t if k in EXPR_KEYS or k == "shape"]
        if exprs:
            k = rng.choice(exprs)
            if k == "shape" and isinstance(t[k], list) and t[k]:
                i = rng.randrange(len(t[k]))
                t[k][i], bad = damage_expr(t[k][i], rng, facts)
            else:
                t[k], bad = damage_expr(t[k], rng, facts)
    elif op == "drop" and keys:
        del t[rng.choice(keys)]
    elif op == "unknown":
        t[rng.choice(["alignment", "size", "phases", "regs_max", "depth_max", "scope_x", "owner", "x"])] = pool(rng)
        bad = kind in FIXED_SCHEMA
    elif op == "empty":
        t.clear()
    elif op == "rename" and name is not None:
        same = [n for n in _kind_table(d, kind) if n != name]
        new = rng.choice(same + list(d.get("params", {})) + ["num_sms", "resident_ctas", "grid_x", name + "x", "x", "int", "pl_x", "_X", "a-b", "1x", "nope", "ws", "acc", "kv", "q",
                                 "sync", "block_q", "block_m", "top_k", "tile", "out", "ab", "wg0", "xs"])
        parent = _kind_table(d, kind)
        if new in parent:  # a duplicate name: TOML cannot say it twice, so one clause takes the other's name
            parent[new] = parent.pop(name)
        else:
            parent[new] = parent.pop(name)
        renames[(kind, name)] = new
        bad = kind == "fact" and new in ("num_sms", "resident_ctas", "grid_x")
        if kind in ("fact",):
            for c in clauses(d):
                for k in c[2]:
                    if isinstance(c[2][k], str) and k in EXPR_KEYS:
                        c[2][k] = re.sub(rf"\b{re.escape(name)}\b", new, c[2][k]) if rng.random() < 0.5 else c[2][k]
    elif op == "copy" and name is not None:
        other = rng.choice([k for k in NAMED if k != kind])
        _kind_table(d, other)[name] = json.loads(json.dumps(t))
        bad = other in ("barrier", "callable.export", "callable.import", "host") and len(t) > 1
    elif op == "param" and isinstance(d.get("params"), dict):  # a host value named like a runtime value or a fact
        new = rng.choice(["num_sms", "resident_ctas", "grid_x"] + facts + ["cluster_x", "t", "x"])
        d["params"][new] = rng.choice(["u32", "u64", "i32", "ptr"])
        bad = new in ("num_sms", "resident_ctas", "grid_x")
    elif op == "host":
        h = d.setdefault("host", {})
        params = list(d.get("params", {}))
        k = rng.choice(["fills", "reads", "facts", "provider"])
        h[k] = (rng.choice(STRS) if k == "provider" else
                rng.choice([[], rng.sample(params, min(len(params), rng.randint(0, 3))), ["nope"], facts[:1] * 2,
                            params + ["x"], [1]]))
    elif op == "resource":  # well-formed claims the solver must place or refuse (L-SMEM, L-REGS, L-WARPS, L-BARRIER)
        what = rng.choice(["warps", "regs", "smem", "barriers", "depth", "stage"])
        if what in ("warps", "regs") and isinstance(d.get("role"), dict):
            d["role"]["warps" if what == "warps" else "regs"] = (
                rng.choice([1, 3, 4, 8, 12, 16, 20, 24, 28, 32]) if what == "warps" else
                rng.choice([[24, 24], [240, 256], [200, 240], [256, 256], [128, 168], [232, 240], [24, 256]]))
        elif what == "smem":
            sm = d.setdefault("smem", {})
            for n in range(rng.randint(1, 6)):
                sm[f"fz{n}"] = {"bytes": rng.choice([16, 4096, 65536, 131072, 200000, 232448, 2**20]),
                                "align": rng.choice([16, 128, 1024]),
                                "phase": rng.choice(["kernel", "a", "b", "epilogue"])}
        elif what == "barriers":
            bars = d.setdefault("barrier", {})
            for n in range(rng.choice([1, 8, 14, 15, 16])):
                bars[f"fz{n}"] = {"threads": rng.choice(["role", 32, 128, 256, 1024])}
                bad = bad or bars[f"fz{n}"]["threads"] == 1024  # more threads than any corpus's roles have
        elif isinstance(d.get("ring"), dict) and d["ring"]:
            r = d["ring"][rng.choice(list(d["ring"]))]
            if what == "depth":
                r["depth"] = rng.choice([[1, 1], [6, 64], [64, 64], [8, 16], [3, 3]])
            else:
                r["stage_bytes"] = rng.choice([65536, 131072, 232448, "block_q * head_dim * 16", 1024])
    elif op == "accept":
        f = d.get("fact", {})
        if f:
            fn = rng.choice(list(f))
            f[fn] = rng.choice([{"accept": rng.choice(LISTS + DICTS)}, {"own": rng.choice(INTS)},
                                {"own": 0}, {"accept": [0]}, {"type": "u32"}, {"own": 1, "accept": [1]}])
    sigs = [c.get("signature") for k in ("export", "import") for c in d.get("callable", {}).get(k, {}).values()
            if isinstance(c, dict)] if isinstance(d.get("callable"), dict) else []
    bad = bad or any(isinstance(x, str) and (x.count("(") != 1 or not x.rstrip().endswith(")") or
                                             any(ch in x for ch in ';{}#"=/[]<>')) for x in sigs)
    return dumps(d), bad, {f"{k}:{o}": n for (k, o), n in renames.items()}


def forge_consistent(manifest: dict, text: str) -> dict:
    """The measurement a correct object for the damaged contract would have: every declared
    handle used, every definition measured, every owned fact recorded (so the package passes
    its re-verification and check/solve/generate judge the damage). Unparseable: unchanged."""
    from pipelink.linker.contract import parse_contract_text
    from pipelink.common.diagnostics import Rejected

    try:
        c = parse_contract_text(text, "fuzz.contract.toml")
    except Rejected:
        return manifest
    ms = manifest.setdefault("measured", {})
    old_regs = ms.get("regs") if isinstance(ms.get("regs"), dict) else {}
    was = set(ms.get("handles") or ()) if isinstance(ms.get("handles"), list) else set()
    ms["handles"] = sorted(s for s, clause in c.handle_symbols().items()
                           if clause != "role" or s.replace(f"pl_{c.name}__", f"pl_{manifest.get('name')}__") in was)
    ms["regs"] = {s: old_regs.get(s, 64) for s in c.defined_symbols()}
    ms["own_facts"] = {f"pl_{c.name}__own__{f.name}": f.own for f in c.facts if f.own is not None}
    manifest["name"] = c.name
    return manifest


def forge_handles(manifest: dict, component: str, renames: dict[str, str]) -> dict:
    """Rename the measured handles and definitions as if the object had been built with the
    renamed clause (so check/solve judge the rename, not the package's re-verification)."""
    def ren(sym: str) -> str:
        for key, new in renames.items():
            kind, old = key.split(":", 1)
            for hk in HANDLE_KINDS.get(kind, []):
                if sym == f"pl_{component}__{hk}__{old}":
                    return f"pl_{component}__{hk}__{new}"
        return sym

    ms = manifest.get("measured", {})
    if isinstance(ms.get("handles"), list):
        ms["handles"] = [ren(h) if isinstance(h, str) else h for h in ms["handles"]]
    if isinstance(ms.get("regs"), dict):
        ms["regs"] = {ren(k): v for k, v in ms["regs"].items()}
    if isinstance(ms.get("own_facts"), dict):
        ms["own_facts"] = {renames.get(f"fact:{k}", k): v for k, v in ms["own_facts"].items()}
    return manifest


def mutate_kernel(text: str, rng: random.Random, instances: list[tuple[str, str]], exports: list[str],
                  imports: list[str]) -> tuple[str, bool]:
    """Damage a kernel file: [kernel] values, grid expressions, cluster, instances, binds."""
    d = tomllib.loads(text)
    k = d.setdefault("kernel", {})
    inst = d.setdefault("instance", [])
    op = rng.choice(["grid", "grid", "cluster", "value", "inst_dup", "inst_drop", "inst_value", "bind", "bind",
                     "unknown", "launch_args", "resident"])
    bad = False
    if op == "resident" and "resident_ctas" in str(k.get("grid")):  # a co_resident kernel's bound, broken
        k["grid"] = rng.choice([["resident_ctas * 2", 1, 1], ["resident_ctas + 1", 1, 1], ["resident_ctas", "t", 1],
                                ["max(resident_ctas, num_sms + 1)", 1, 1], [k["grid"][0], 2, 1]])
        bad = True
    if op == "grid":
        g = list(k.get("grid", [1, 1, 1]))
        i = rng.randrange(len(g)) if g else 0
        if g and rng.random() < 0.7:
            g[i], bad = damage_expr(g[i], rng, ["resident_ctas", "num_sms", "q_len", "bh", "splits", "t", "m", "n"])
        else:
            g = rng.choice(LISTS)
        k["grid"] = g
    elif op == "cluster":
        k["cluster"] = rng.choice([[2, 1, 1], [1, 2, 1], [4, 4, 1], [0, 1, 1], [16, 1, 1], [2, 2, 2], [3, 1, 1], [2, 1],
                                   ["2", 1, 1], 2])
    elif op == "value":
        k[rng.choice(["name", "arch", "grid", "cluster", "launch_args"])] = pool(rng)
    elif op == "inst_dup" and inst:
        it = dict(rng.choice(inst))
        it["name"] = rng.choice([it["name"] + "2", it["name"], "int", "pl_inst", "x"])
        inst.insert(rng.randrange(len(inst) + 1), it)
        bad = it["name"] in [x.get("name") for x in inst if x is not it]
    elif op == "inst_drop" and inst:
        del inst[rng.randrange(len(inst))]
    elif op == "inst_value" and inst:
        it = rng.choice(inst)
        it[rng.choice(["name", "package", "count", "instances"])] = rng.choice(
            [rng.choice(STRS), rng.choice([p for _, p in instances] or ["x"]), pool(rng)])
    elif op == "bind":
        b = d.setdefault("bind", [])
        names = [n for n, _ in instances] + ["nope"]
        imp = rng.choice(imports + [f"{rng.choice(names)}.{rng.choice(['acc', 'out', 'tile', 'x'])}"])
        exp = rng.choice(exports + [f"{rng.choice(names)}.{rng.choice(['acc', 'out', 'tile', 'x'])}", imp, "x", ""])
        b.append(rng.choice([{"import": imp, "export": exp}, {"import": imp}, {"export": exp},
                             {"import": imp, "export": exp, "x": 1}, {"import": 1, "export": exp}, {}]))
        if rng.random() < 0.3:
            b.append(dict(b[-1]))
    elif op == "unknown":
        rng.choice([k, d])[rng.choice(["resident", "workspaces", "block", "x"])] = pool(rng)
        bad = True
    elif op == "launch_args":
        k["launch_args"] = rng.choice(LISTS + [["resident_ctas"], ["num_sms"], ["block_q"], ["q_len"], ["bh", "bh"]])
    return dumps(d), bad


def load_corpora(bin_dir: Path, work: Path, names=None) -> dict[str, dict]:
    """Copy each corpus's packages (those built) into work/; a corpus missing a package is skipped."""
    out = {}
    for name, (kernel, pkgs, linkable) in CORPORA.items():
        if names is not None and name not in names:
            continue
        src = [bin_dir / f"{p}.plpkg" for p in pkgs]
        kernel_file = bin_dir / kernel.removeprefix("bin:") if kernel.startswith("bin:") else ROOT / kernel
        if not all(p.is_file() for p in src) or not kernel_file.is_file():
            continue
        dst = work / "corpora" / name
        dst.mkdir(parents=True, exist_ok=True)
        paths = []
        for p in src:
            q = dst / p.name
            shutil.copyfile(p, q)
            paths.append(q)
        out[name] = {"kernel": kernel_file, "packages": paths, "linkable": linkable}
    return out


# ---- case builders (called by fuzz.cli.Fuzzer) -----------------------------------------------------------

def _names(corpus: dict) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """(instances, "inst.export" names, "inst.import" names) of a corpus's kernel file."""
    import zipfile

    if "names" not in corpus:
        by_pkg = {}
        for p in corpus["packages"]:
            c = tomllib.loads(zipfile.ZipFile(p).read("contract.toml").decode())
            by_pkg[c["component"]["name"]] = c
        k = tomllib.loads(Path(corpus["kernel"]).read_text())
        inst = [(i["name"], i["package"]) for i in k.get("instance", [])]
        exp, imp = [], []
        for iname, pname in inst:
            c = by_pkg.get(pname, {})
            exp += [f"{iname}.{n}" for n in c.get("export", {})] + [f"{iname}.{n}" for n in c.get("callable", {}).get("export", {})]
            imp += [f"{iname}.{n}" for n in c.get("import", {})] + [f"{iname}.{n}" for n in c.get("callable", {}).get("import", {})]
        corpus["names"] = (inst, exp, imp)
    return corpus["names"]


def real_contract_case(fz, d: Path, rng: random.Random):
    """A clause-damaged contract injected into one built package of a real kernel."""
    import zipfile

    from fuzz.damage import mutate_toml, rezip

    cname = rng.choice(sorted(fz.corpora))
    corpus = fz.corpora[cname]
    i = rng.randrange(len(corpus["packages"]))
    src = corpus["packages"][i]
    data = src.read_bytes()
    text = zipfile.ZipFile(src).read("contract.toml").decode()
    hosts = [n for n in zipfile.ZipFile(src).namelist() if n.startswith("host/")]
    r = rng.random()
    if r < 0.12 or (r < 0.2 and hosts):  # the package's bytes, manifest types, or its host provider
        from fuzz.damage import damage_package

        p = d / src.name
        if r < 0.12:
            p.write_bytes(damage_package(data, rng))
        else:
            p.write_bytes(rezip(data, forge=rng.random() < 0.9, parts={rng.choice(hosts): rng.choice(HOST_SOURCES)}))
        pkgs = [x for j, q in enumerate(corpus["packages"]) for x in ("--package", str(p if j == i else q))]
        return _plan_or_link(fz, d, rng, corpus, pkgs, str(corpus["kernel"]), False)
    renames: dict[str, str] = {}
    if rng.random() < 0.8:
        new, bad, renames = mutate_contract(text, rng)
    else:
        raw, bad = mutate_toml(text, rng)
        new = raw.decode(errors="replace")
    comp = tomllib.loads(text)["component"]["name"]

    lied = []

    def edit(m):
        was = json.dumps(m.get("measured"), sort_keys=True)
        r = rng.random()
        m = forge_consistent(m, new) if r < 0.8 else forge_handles(m, comp, renames) if r < 0.95 else m
        lied.append(json.dumps(m.get("measured"), sort_keys=True) != was)
        return json.dumps(m).encode()

    p = d / src.name
    p.write_bytes(rezip(data, manifest=edit, contract=new.encode(), forge=True))
    pkgs = [x for j, q in enumerate(corpus["packages"]) for x in ("--package", str(p if j == i else q))]
    # A measurement forged to match a renamed or added clause is a lie about the real object:
    # check/solve may judge it (plan), but nvJitLink would rightly find the object's real handles.
    return _plan_or_link(fz, d, rng, corpus, pkgs, str(corpus["kernel"]), bad, plan_only=any(lied))


def real_kernel_case(fz, d: Path, rng: random.Random):
    """A damaged kernel file of a real kernel, with its built packages."""
    cname = rng.choice(sorted(fz.corpora))
    corpus = fz.corpora[cname]
    text = Path(corpus["kernel"]).read_text()
    inst, exp, imp = _names(corpus)
    if rng.random() < 0.8:
        new, bad = mutate_kernel(text, rng, inst, exp, imp)
        data = new.encode()
    else:
        from fuzz.damage import mutate_toml

        data, bad = mutate_toml(text, rng)
    k = d / Path(corpus["kernel"]).name
    k.write_bytes(data)
    pkgs = [x for q in corpus["packages"] for x in ("--package", str(q))]
    if rng.random() < 0.1 and len(corpus["packages"]) > 1:  # a package left out or given twice
        j = rng.randrange(0, len(pkgs), 2)
        pkgs = pkgs[:j] + pkgs[j + 2:] if rng.random() < 0.5 else pkgs + pkgs[j:j + 2]
    return _plan_or_link(fz, d, rng, corpus, pkgs, str(k), bad)


def _plan_or_link(fz, d: Path, rng, corpus, pkgs, kernel, bad, *, plan_only: bool = False):
    if not (corpus["linkable"] and rng.random() < fz.real_link_rate) or plan_only:
        return ["plan", "--kernel", kernel, *pkgs], [], bad
    outs = [d / "out" / f"k.{x}" for x in ("cubin", "manifest.json", "report.json", "map.txt")]
    flags = [x for f, p in zip(("--cubin", "--manifest", "--report", "--map"), outs) for x in (f, str(p))]
    return ["link", "--kernel", kernel, *pkgs, *flags], outs, bad
