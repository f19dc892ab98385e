"""Damage for fuzz/cli.py: line edits of TOML files, package byte/manifest/contract
damage with re-recorded digests, typed value pools, expression edits and a small TOML writer
(for the clause-aware damage of fuzz/corpora.py)."""

from __future__ import annotations

import io
import json
import math
import random
import re
import zipfile

VALUES = ["0", "-1", "1", "32", "true", "false", '""', '"x"', "[]", "[true, 8]", "[8, 2]", "[1, 2, 3]", "1.5", "nan",
          "{}", "{multiple_of = 0}", "{min = 5, max = 1}", "4294967296", "4294967295", "1048576", "1048575",
          "2147483648", "18446744073709551616", "-18446744073709551616", "65536", '"' + "9" * 5000 + '"',
          '"n / block_q"', '"tile * tile * tile * tile * tile"', '"1 // 0"', '"tile /"', '"__import__(\'os\')"',
          '"min()"', '"ceil_div(1)"', '"role"', '"sm_90a"', '"sm_91"', '"u64"', '"f32"', '"ptr"', '"\\u0000"',
          "[1, 1, 1]", '["blocks", 1, 1]', '["blocks", 0, 1]', '["nope", 1, 1]', '"' + "a" * 300 + '"']
JUNK = [b"\xff\xfe", b"\x00", b"\nnest = " + b"[" * 50000, b"\nnest = " + b"{a = " * 3000, b"\n[component]\n", b"\n[[instance]]\n", b"=", b"[", b'"', b"\n[x.y.z]\nq = 1\n", b"\t\r\n"]


# ---- mutations ---------------------------------------------------------------------------------------

def mutate_toml(text: str, rng: random.Random) -> tuple[bytes, bool]:
    """(damaged bytes, surely_invalid). Line-level edits of a TOML file."""
    lines = text.splitlines()
    op = rng.choice(["value", "value", "value", "delete", "dup", "key", "junk", "truncate", "table"])
    surely_bad = False
    idx = [i for i, ln in enumerate(lines) if "=" in ln and not ln.lstrip().startswith("#")]
    if op == "value" and idx:
        i = rng.choice(idx)
        k = lines[i].split("=", 1)[0]
        v = rng.choice(VALUES)
        lines[i] = f"{k}= {v}"
        key = k.strip()
        surely_bad = (key == "arrivals" and v in ("0", "-1", "4294967296", "1048576", "2147483648", "true", '""')
                      or key in ("warps", "align") and v in ("0", "-1", "true", '""', "4294967296"))
    elif op == "delete" and lines:
        del lines[rng.randrange(len(lines))]
    elif op == "dup" and lines:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif op == "key" and idx:
        i = rng.choice(idx)
        k, v = lines[i].split("=", 1)
        lines[i] = k.rstrip() + rng.choice(["x", "_", "s", ""]) + " =" + v
    elif op == "table":
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(["[smem.extra]", "[fact.tile]", "[role]", "[[bind]]",
                                                                 '[[bind]]\nimport = "out.acc"\nexport = "out.acc"',
                                                                 "[kernel]", "[ring.work]", "[import.acc]"]))
    data = "\n".join(lines).encode() + b"\n"
    if op == "junk":
        at = rng.randrange(len(data) + 1)
        data = data[:at] + rng.choice(JUNK) + data[at:]
    elif op == "truncate":
        data = data[: rng.randrange(len(data) + 1)]
    return data, surely_bad


def rezip(data: bytes, *, manifest=None, contract: bytes | None = None, forge: bool = False,
          parts: dict[str, bytes] | None = None) -> bytes:
    """The package with an edited manifest or contract.toml. forge=True records the edited
    parts' digests (as if packed that way), so the checks behind the digests are reached."""
    from pipelink.linker.package_io import package_digests

    src = zipfile.ZipFile(io.BytesIO(data))
    entries = {info.filename: src.read(info) for info in src.infolist()}
    if contract is not None:
        entries["contract.toml"] = contract
    entries.update(parts or {})  # e.g. {"host/loader_host.py": b"..."}
    body = manifest(json.loads(entries["pipelink-package.json"])) if manifest else entries["pipelink-package.json"]
    if forge:
        try:
            m = json.loads(body)
            part = lambda kind: {k[len(kind) + 1:]: v for k, v in entries.items() if k.startswith(kind + "/")}  # noqa: E731
            m["digests"] = package_digests(m, entries["contract.toml"], part("objects"), part("sources"), part("host"))
            body = json.dumps(m).encode()
        except (ValueError, TypeError, AttributeError):
            pass  # a manifest too broken to forge: its own checks must catch it
    entries["pipelink-package.json"] = body
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, b in entries.items():
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), b, compress_type=zipfile.ZIP_DEFLATED)
    return buf.getvalue()


JSON_VALUES = [None, 0, -1, 1.5, "", "x", [], {}, [None], [1], ["sm_90a"], {"a": None}, 2**70, True]


def damage_package(data: bytes, rng: random.Random) -> bytes:
    op = rng.choice(["flip", "truncate", "method", "flags", "json", "json", "handles", "contract"])
    b = bytearray(data)
    if op == "flip":
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b)
    if op == "truncate":
        return bytes(b[: rng.randrange(len(b))])
    if op in ("method", "flags"):
        sig = rng.choice([b"PK\x03\x04", b"PK\x01\x02"])
        i, off = b.find(sig), 6 if sig == b"PK\x03\x04" else 8
        while i >= 0:
            if op == "method":
                b[i + off + 2:i + off + 4] = rng.choice([1, 6, 9, 12, 14, 97, 99]).to_bytes(2, "little")
            else:
                b[i + off] |= rng.choice([1, 8, 64])
            i = b.find(sig, i + 4)
        return bytes(b)
    if op == "json":
        def edit(m):
            path = rng.choice([("arch",), ("name",), ("format",), ("toolkit",), ("objects",), ("sources",), ("copts",),
                               ("contract_file",), ("measured",), ("measured", "handles"), ("measured", "own_facts"),
                               ("measured", "static_smem"), ("measured", "regs")])
            t = m
            for k in path[:-1]:
                t = t.setdefault(k, {}) if isinstance(t, dict) else {}
            if isinstance(t, dict):
                if rng.random() < 0.2:
                    t.pop(path[-1], None)
                else:
                    t[path[-1]] = rng.choice(JSON_VALUES)
            return json.dumps(m).encode()
        return rezip(data, manifest=edit, forge=rng.random() < 0.5)
    if op == "handles":
        def edit(m):
            hs = m["measured"]["handles"]
            hs.append(rng.choice([None, 3, "", "pl_consumer__tmem__x", "pl_consumer__smem__nope", "vprintf",
                                  "pl_other__smem__scratch", "pl_consumer__role__", "pl_consumer__bar__combine"]))
            return json.dumps(m).encode()
        return rezip(data, manifest=edit, forge=rng.random() < 0.5)
    contract = zipfile.ZipFile(io.BytesIO(data)).read("contract.toml").decode()
    return rezip(data, contract=mutate_toml(contract, rng)[0], forge=rng.random() < 0.5)


INTS = [0, -1, 1, 2, 3, 7, 8, 31, 32, 33, 64, 127, 128, 255, 256, 1023, 1024, 2048, 4096, 65535, 65536, 232448,
        2**20 - 1, 2**20, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, -2**63]
STRS = ["", "x", "role", "kernel", "instance", "producer", "consumer", "library", "reg", "smem", "global", "warp",
        "warpgroup", "cta", "u32", "u64", "i32", "f32", "ptr", "tmap", "bf16", "f16", "sm_90a", "sm_100a", "sm_80",
        "void(float*)", "unsigned(unsigned)", "unsigned(", "void()", "float(float, unsigned, unsigned, float, float)",
        "int", "nope", "block_m", "block_q", "head_dim", "top_k", "1 / 0", "1 // 0", "7 % 0", "ceil_div(4, 0)",
        "4294967296 * 4294967296", "0", "0 - 1", "-4096", "min()", "max(1)", "a" * 300, "\u0000", "x.py", "../x.py",
        "__import__('os')", "resident_ctas", "num_sms", "grid_x", "cluster_x", "t", "world", "moe_gu16", "attn_o(2)",
        "mma_acc(2,4)", "blocked", "cyclic", "row_major", "expert_host.py", "9" * 30]
LISTS = [[], [1], [2, 1], [1, 2, 3], [0, 0], [True, 8], ["a"], [1.5], [[1]], [{}], [-1, 2], [24, 257], [64, 64],
         [1, 64], [0, 65], [2**32, 1], ["tmap_q", "tmap_q"], ["nope"], ["block_q"], ["x", "q_len"], ["1 // 0", 1],
         ["t", "nope"], [1, 1, 1], [2, 2, 8], [17, 1, 1], ["resident_ctas", 0, 1], ["splits", "bh", 1, 1]]
DICTS = [{}, {"min": 5, "max": 1}, {"multiple_of": 0}, {"min": 0, "max": 2**32}, {"x": 1}, {"min": 16},
         {"max": 0}, {"multiple_of": 2**31}, {"min": 64, "max": 64, "multiple_of": 128}]
OTHER = [True, False, 1.5, math.nan, math.inf, -0.0]


HOST_SOURCES = [b"", b"def provide(:\n", b"provide = 1\n", b"def provide(lent, facts, host):\n    return {}\n",
                b"\xff\xfe", b"def provide(lent, facts, host):\n    raise SystemExit(3)\n", b"import os\nos._exit(9)\n",
                b"def provide(*a):\n    return None\n", b"x = " + b"(" * 5000 + b"\n"]


def pool(rng: random.Random):
    return rng.choice([rng.choice(INTS), rng.choice(INTS), rng.choice(STRS), rng.choice(STRS), rng.choice(LISTS),
                       rng.choice(DICTS), rng.choice(OTHER)])


def like(v, rng: random.Random, names: list[str]):
    """Another value of the same type: well-typed damage gets past the schema to check/solve."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return rng.choice(INTS + [v * 2, v + 1, v - 1, v * 1024, v // 2])
    if isinstance(v, str):
        if re.search(r"[a-z_]\w*|\d", v) and rng.random() < 0.5 and not re.search(r"[()]\s*$|^\w+$", v):
            return damage_expr(v, rng, names)[0]
        return rng.choice(STRS + [v + "x", v.upper(), v[:-1], f"{v}, {v}"])
    if isinstance(v, list):
        w = list(v)
        if w and rng.random() < 0.7:
            i = rng.randrange(len(w))
            w[i] = like(w[i], rng, names)
        else:
            w = rng.choice([w[::-1], w + w[:1], w[1:], [x for x in w for _ in (0, 1)]])
        return w
    if isinstance(v, dict):
        w = dict(v)
        if w:
            k = rng.choice(list(w))
            w[k] = like(w[k], rng, names)
        return w
    return pool(rng)


def damage_expr(e, rng: random.Random, names: list[str]) -> tuple[object, bool]:
    """(new expression, surely invalid): an edit of an integer or expression value."""
    s = str(e)
    op = rng.randrange(10)
    if op == 0:
        return f"({s}) // 0", True
    if op == 1:
        return f"ceil_div({s}, 0)", True
    if op == 2:  # beyond 2^64 for every value of its names (>= 1)
        return f"({s}) * 4294967296 * 4294967296 * 4294967296", True
    if op == 3:
        return f"({s}) - 4294967296", False
    if op == 4:
        return f"({s}) * nope_fact", True
    if op == 5 and names:
        return s.replace(rng.choice(names), rng.choice(names + ["resident_ctas", "grid_x", "cluster_x"])), False
    if op == 6:  # a divisor that is 0 for every value of its names
        return f"{s} % ({s} - {s})", True
    if op == 7:
        return f"0 * ({s})", False
    if op == 8:  # not an expression of the grammar
        return rng.choice([f"{s} +", f"({s}", f"{s} ** 2", f"{s} << 2", "1.5", f"{s}; 1", f"{s}[0]"]), True
    return rng.choice([f"{s} / 2", f"-({s})", f"max({s}, 1)", f"min({s}, 0)", f"({s}) // ({'1+' * 600}1)",
                       "+".join([s] * 400)]), False


# ---- a small TOML writer (enough for what tomllib reads back) --------------------------------------------

def _val(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_val(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_val(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def dumps(d: dict) -> str:
    out: list[str] = []

    def table(prefix: list[str], t: dict):
        scalars = {k: v for k, v in t.items()
                   if not isinstance(v, dict) and not (isinstance(v, list) and v and all(isinstance(x, dict) for x in v))}
        if prefix and (scalars or not any(isinstance(v, dict) for v in t.values())):
            out.append("[" + ".".join(_key(p) for p in prefix) + "]")
        for k, v in scalars.items():
            out.append(f"{_key(k)} = {_val(v)}")
        for k, v in t.items():
            if isinstance(v, dict):
                table(prefix + [k], v)
            elif k not in scalars:
                for item in v:
                    out.append("[[" + ".".join(_key(p) for p in prefix + [k]) + "]]")
                    out.extend(f"{_key(a)} = {_val(b)}" for a, b in item.items())

    table([], d)
    return "\n".join(out) + "\n"
