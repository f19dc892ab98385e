"""`pipelink diff-map A B`: what moved between two links of a kernel, from their placements.

Compares items by key (claims, barriers, roles by instance, rings by name, workspaces) and the
kernel-wide numbers (threads, dynamic shared memory, warp-group budgets), and lists every
change as one `Change`: the relink story told to a person, as text or as an HTML page that
draws both shared-memory maps with the changed claims outlined. Two placements of different
kernels are compared the same way (by key), with a note saying so.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from pipelink.linker.map_html import colors, header, page, smem_svg
from pipelink.linker.placement import origin_text

_e = html.escape


@dataclass(frozen=True)
class Change:
    kind: str  # claim | barrier | role | ring | workspace | kernel
    key: str
    what: str  # "added", "removed", or the field that changed
    before: str
    after: str
    origin: str = ""  # the contract clause (of B, else of A)

    def text(self) -> str:
        if self.what == "added":
            return f"  + {self.kind} {self.key}: {self.after}"
        if self.what == "removed":
            return f"  - {self.kind} {self.key}: {self.before}"
        return f"  ~ {self.kind} {self.key}: {self.what} {self.before} -> {self.after}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "key": self.key, "what": self.what, "before": self.before, "after": self.after,
                "origin": self.origin}


def _claim(c):
    return f"[{c['offset']} .. {c['offset'] + c['bytes']}) phase {c['phase']}"


def _role(r):
    return f"warps {r['warp_begin']}..{r['warp_begin'] + r['warps'] - 1}, {r['budget']} registers"


# kind -> (list field, key field, summary, compared fields)
_KINDS = (
    ("claim", "claims", "key", _claim, ("offset", "bytes", "phase", "align")),
    ("barrier", "barriers", "key", lambda b: f"id {b['id']}", ("id", "threads")),
    ("role", "roles", "instance", _role, ("warp_begin", "warps", "budget")),
    ("ring", "rings", "name", lambda r: f"depth {r['depth']}, {r['stage_bytes']} B/stage", ("depth", "stage_bytes")),
    ("workspace", "workspaces", "key", lambda w: f"{w['bytes']} B", ("bytes", "zero", "align", "scope")),
)
_KERNEL_FIELDS = ("arch", "threads", "warps", "dynamic_smem", "static_smem", "warp_group_budgets", "setmaxnreg")


def diff(a: dict, b: dict) -> list[Change]:
    out = [Change("kernel", b["kernel"], f, str(a.get(f)), str(b.get(f))) for f in _KERNEL_FIELDS if a.get(f) != b.get(f)]
    for kind, field, keyf, summary, fields in _KINDS:
        before = {str(x[keyf]): x for x in a[field]}
        after = {str(x[keyf]): x for x in b[field]}
        for key in sorted(before.keys() | after.keys()):
            x, y = before.get(key), after.get(key)
            where = "; ".join(origin_text(o) for o in (y or x)["origins"])
            if x is None:
                out.append(Change(kind, key, "added", "", summary(y), where))
            elif y is None:
                out.append(Change(kind, key, "removed", summary(x), "", where))
            else:
                out += [Change(kind, key, f, str(x.get(f)), str(y.get(f)), where) for f in fields if x.get(f) != y.get(f)]
    return out


def diff_text(a: dict, b: dict, changes: list[Change], names: tuple[str, str]) -> str:
    lines = [f"A: {names[0]} (kernel {a['kernel']}, {a['dynamic_smem']} B shared, {a['threads']} threads)",
             f"B: {names[1]} (kernel {b['kernel']}, {b['dynamic_smem']} B shared, {b['threads']} threads)"]
    if a["kernel"] != b["kernel"]:
        lines.append(f"note: A and B place different kernels ({a['kernel']} and {b['kernel']}); items are matched by key")
    if not changes:
        return "\n".join(lines + ["no placement changes"])
    lines.append(f"{len(changes)} change{'s' if len(changes) != 1 else ''}:")
    for c in changes:  # one line per item: "~ claim x: offset 0 -> 128, bytes 64 -> 32"
        same_item = lines[-1].startswith(f"  ~ {c.kind} {c.key}: ")
        if c.what not in ("added", "removed") and same_item:
            lines[-1] += f", {c.what} {c.before} -> {c.after}"
        else:
            lines.append(c.text())
    return "\n".join(lines)


def render_diff(a: dict, b: dict, changes: list[Change], names: tuple[str, str]) -> str:
    cmap = colors(b)
    for n, c in colors(a).items():
        cmap.setdefault(n, c)
    moved = frozenset(c.key for c in changes if c.kind == "claim")
    rows = "".join(f'<tr data-kind="{_e(c.kind)}" data-key="{_e(c.key)}"><td>{_e(c.kind)}</td><td>{_e(c.key)}</td>'
                   f"<td>{_e(c.what)}</td><td>{_e(c.before)}</td><td>{_e(c.after)}</td><td>{_e(c.origin)}</td></tr>"
                   for c in changes)
    note = (f'<p class="sub">A and B place different kernels ({_e(a["kernel"])} and {_e(b["kernel"])}); '
            "items are matched by key</p>" if a["kernel"] != b["kernel"] else "")
    table = ("<table><tr><th>kind</th><th>item</th><th>change</th><th>A</th><th>B</th><th>contract</th></tr>" + rows
             + "</table>") if changes else '<p class="sub">no placement changes</p>'
    body = [f"<h1>What moved: {_e(names[0])} → {_e(names[1])}</h1>", note, f"<h2>{len(changes)} changes</h2>", table,
            '<div class="grid"><div>', "<h2>A</h2>", header(a), smem_svg(a, cmap, moved, 480, (b,)), "</div><div>",
            "<h2>B</h2>", header(b), smem_svg(b, cmap, moved, 480, (a,)),
            '</div><div><h2>Details</h2><div id="details">click a claim</div></div></div>']
    return page(f"diff-map {a['kernel']} -> {b['kernel']}", "\n".join(body))
