"""Guard link mode (`pipelink link --guard`): run-time checks of the placement, no component edits.

Components are already compiled, so the guard works where the linker has the pen: the
placement and the generated code.
- Red zones: every shared-memory claim (each `[smem.X]`, each ring's buffer and its `full` /
  `empty` mbarrier arrays, each staged transfer) gets RED_ZONE bytes after it, and all claims
  are made phase "kernel" so no other claim ever lives in a red zone. The dispatcher fills the
  red zones with a pattern before any role runs; after every role has returned, the block
  checks them, and a changed word prints which claim (instance, package, clause) was
  overrun and traps. A ring index past the depth lands in the buffer's or the barrier array's
  red zone.
- Handles: a handle called with an instance number its package does not have (a corrupted
  `pl_inst`) prints the handle and traps instead of returning another instance's value.
- Checked accesses (pipelink.h's PL_SMEM_AT, PL_BARRIER_SYNC, PL_BARRIER_ARRIVE): their handles,
  plain code in an unguarded link, here first check the access. PL_SMEM_AT traps on an element
  outside its claim (a read too: red zones only show writes); the barrier forms trap on a thread
  count other than the clause's. The message names the clause, the instance and the caller's
  file:line. Accesses through raw pointers and raw `bar.sync` stay unchecked at run time (an
  immediate count is checked statically on every link: L-BARRIER-THREADS).
- Barrier ids are checked statically on every link (linked_checks.py, L-SASS).
Run guarded kernels under `compute-sanitizer` (tests/linker/test_guard.py) to also catch accesses
outside the dynamic window. The guard costs shared memory and time: it is for testing.
"""

from __future__ import annotations

import dataclasses
import re

from pipelink.linker.check_types import Checked
from pipelink.linker.compose import Instance
from pipelink.linker.generate import CHECKED_KINDS, generate
from pipelink.linker.solve import Placement

RED_ZONE = 128  # bytes after each claim; a multiple of every claim alignment up to 128
_PATTERN = "0x9E3779B9u"  # word k of a zone holds PATTERN * (k + 1): position-dependent, rarely written by accident
_HANDLE = re.compile(r'^extern "C" __device__ unsigned (pl_\w+)\(unsigned i\) \{ (.*) \}$')


def with_red_zones(ch: Checked) -> Checked:
    """The same kernel with RED_ZONE bytes added after every claim, and no phase sharing."""
    claims = [dataclasses.replace(c, bytes=c.bytes + RED_ZONE, phase="kernel") for c in ch.claims]
    return dataclasses.replace(ch, claims=claims)


def _zones(ch: Checked, pl: Placement) -> list[tuple[int, str]]:
    """(first red-zone byte, description) per claim, from the placement of the padded claims."""
    out = []
    for c in ch.claims:
        start = pl.offsets[c.key] + pl.sizes[c.key] - RED_ZONE
        out.append((start, _c_string(f"{c.key} [{c.origin}]")))
    return sorted(out)


def _c_string(text: str) -> str:
    """Body of a C string literal printed with %s: quotes, backslashes and any byte outside
    printable ASCII (a path may hold a newline) as 3-digit octal escapes, which end where they must."""
    return "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\?' else "".join(f"\\{b:03o}" for b in ch.encode())
                   for ch in text)


def _instance_counts(ch: Checked) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in ch.comp.instances:
        counts[f"pl_{i.package.name}__"] = counts.get(f"pl_{i.package.name}__", 0) + 1
    return counts


def _guard_handles(lines: list[str], counts: dict[str, int]) -> list[str]:
    out = []
    for line in lines:
        m = _HANDLE.match(line)
        prefix = next((p for p in counts if m and m.group(1).startswith(p)), None)
        if m and prefix:
            n = counts[prefix]
            line = (f'extern "C" __device__ unsigned {m.group(1)}(unsigned i) {{ if (i >= {n}u) {{ '
                    f'printf("pipelink guard: block %d thread %d called {m.group(1)} with instance %u; '
                    f'the package has {n}\\n", (int)blockIdx.x, (int)threadIdx.x, i); __trap(); }} {m.group(2)} }}')
        out.append(line)
    return out


_CHECKED = re.compile(r'^(extern "C" __device__ \w+ (pl_\w+)\(unsigned i, [^)]*\) \{ )(.*)$')
_WHERE = '"pipelink guard: block (%d,%d,%d) thread %d at %s:%u: '
_WHO = "(int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, (int)threadIdx.x, f, l"


def _checked_symbols(ch: Checked) -> dict[str, tuple[str, str, list[Instance]]]:
    """Symbol of every checked handle the objects may call -> (kind, clause name, instances)."""
    by_pkg: dict[str, list[Instance]] = {}
    for inst in ch.comp.instances:
        by_pkg.setdefault(inst.package.name, []).append(inst)
    out = {}
    for insts in by_pkg.values():
        c = insts[0].contract
        for kind in CHECKED_KINDS:
            for name in (s.name for s in c.smem) if kind == "smem_at" else (b.name for b in c.barriers):
                out[f"pl_{c.name}__{kind}__{name}"] = (kind, name, insts)
    return out


def _access_checks(ch: Checked, pl: Placement, sym: str, kind: str, name: str, insts: list[Instance]) -> str:
    """C statements that trap when the access breaks its clause, one per instance."""
    claims = {c.key: c for c in ch.claims}
    barriers = {b.key: b for b in ch.barriers}
    out = [f'if (i >= {len(insts)}u) {{ printf({_WHERE}{sym} called with instance %u; the package has {len(insts)}\\n", {_WHO}, i); '
           "__trap(); }"] if len(insts) > 1 else []
    for k, inst in enumerate(insts):
        only = f"i == {k}u && " if len(insts) > 1 else ""
        if kind == "smem_at":
            claim = claims[f"{inst.name}.smem.{name}"]
            limit = claim.bytes - RED_ZONE  # the claim as the contract has it, without the red zone
            desc = _c_string(f"{claim.key} [{claim.origin}]")
            out.append(f"if ({only}(n > {limit}u || b > {limit}u - n)) {{ printf({_WHERE}bytes %u..%u of shared-memory "
                       f'claim %s are outside its {limit} B\\n", {_WHO}, b, b + n - 1u, "{desc}"); __trap(); }}')
        else:
            bar = barriers[f"{inst.name}.{name}"]
            desc = _c_string(f"{bar.key} [{bar.origin}]")
            op = "bar.sync" if kind == "bar_sync" else "bar.arrive"
            out.append(f"if ({only}t != {bar.threads}u) {{ printf({_WHERE}{op} on named barrier %s (id "
                       f'{pl.barrier_ids[bar.key]}) counts %u threads; its contract counts {bar.threads}\\n", '
                       f'{_WHO}, "{desc}", t); __trap(); }}')
    return " ".join(out) + " "


def _guard_checked_handles(lines: list[str], ch: Checked, pl: Placement) -> list[str]:
    checked = _checked_symbols(ch)
    out = []
    for line in lines:
        m = _CHECKED.match(line)
        if m and m.group(2) in checked:
            line = m.group(1) + _access_checks(ch, pl, m.group(2), *checked[m.group(2)]) + m.group(3)
        out.append(line)
    return out


def generate_guarded(ch: Checked, pl: Placement) -> str:
    src = generate(ch, pl)
    lines = _guard_handles(src.splitlines(), _instance_counts(ch))
    lines = _guard_checked_handles(lines, ch, pl)
    zones = _zones(ch, pl)
    words = RED_ZONE // 4
    table = ", ".join(f"{start}u" for start, _ in zones) or "0u"
    names = ", ".join(f'"{d}"' for _, d in zones) or '""'
    # The dispatcher is the last function of the generated source: find its body.
    begin = max(n for n, ln in enumerate(lines) if ln.startswith(f"{ch.comp.name}(const __grid_constant__"))
    warp_line = next(n for n in range(begin, len(lines)) if "const unsigned pl_warp" in lines[n])
    fill = [f"  // guard: fill the red zones ({len(zones)} claims x {RED_ZONE} B) before any role runs",
            f"  for (unsigned z = threadIdx.x / {words}u; z < {len(zones)}u; z += (blockDim.x + {words - 1}u) / {words}u) {{",
            f"    const unsigned k = threadIdx.x % {words}u;",
            "    reinterpret_cast<unsigned*>(pl::smem_base() + pl_guard_zone[z])[k] = " + _PATTERN + " * (k + 1u);",
            "  }",
            "  __syncthreads();"]
    check = ["pl_guard_end:",
             "  __syncthreads();  // every role has returned",
             f"  for (unsigned z = threadIdx.x / {words}u; z < {len(zones)}u; z += (blockDim.x + {words - 1}u) / {words}u) {{",
             f"    const unsigned k = threadIdx.x % {words}u;",
             "    const unsigned v = reinterpret_cast<const unsigned*>(pl::smem_base() + pl_guard_zone[z])[k];",
             f"    if (v != {_PATTERN} * (k + 1u)) {{",
             '      printf("pipelink guard: block (%d,%d,%d) overran shared-memory claim %s: red-zone byte %u is 0x%08x\\n",',
             "             (int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, pl_guard_name[z], 4u * k, v);",
             "      __trap();",
             "    }",
             "  }"]
    body = lines[warp_line:]
    body = [ln.replace("; return; }", "; goto pl_guard_end; }") for ln in body]
    assert body[-1] == "}", body[-1]
    header = [f"__device__ const unsigned pl_guard_zone[] = {{ {table} }};",
              f"__device__ const char* const pl_guard_name[] = {{ {names} }};"]
    out = ["#include <cstdio>  // device printf for the guard's messages"] + lines[:begin - 1] + header + lines[begin - 1:warp_line] + fill + body[:-1] + check + ["}"]
    return "\n".join(out) + "\n"
