"""`pipelink map --html`: one kernel's SM drawn from its placement (placement.py) as a single
self-contained HTML page (inline CSS, SVG and a few lines of JS; nothing fetched).

Shared memory is drawn as byte ranges (down) over phases (across): a claim of the kernel phase
spans every column, so claims that reuse the same bytes in different phases sit side by side.
The byte axis is piecewise linear so that a 64-byte claim beside a 192 KB one stays visible.
Below it: warps and their roles with the setmaxnreg budget of each warp group, the named
barrier ids, the rings (depth out of the range the contracts allow, bytes per stage) and the
workspaces. Every drawn item carries its owner, contract file:line and why it has its value,
as a tooltip and in the details box a click fills; the table at the end lists them all.
Output is a function of the placement alone (deterministic).
"""

from __future__ import annotations

import html

from pipelink.linker.placement import KERNEL_PHASE, origin_text, owner_text

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
           "#9c755f", "#86bcb6", "#d37295", "#a0cbe8")
SMEM_HEIGHT = 460
MIN_SEGMENT = 13  # px: every byte range between two claim boundaries stays visible
BAR_SYNC_IDS = 16  # id 0 is __syncthreads; the solver places named barriers on 1..15

CSS = """
body{font:13px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:16px;color:#222;background:#fff}
h1{font-size:18px;margin:0 0 4px}h2{font-size:14px;margin:14px 0 6px}
.sub{color:#555;margin-bottom:8px}.grid{display:flex;gap:18px;align-items:flex-start}
svg text{font:11px system-ui,sans-serif}.item{cursor:pointer}.item:hover rect,.item:focus rect,.sel rect{stroke:#000;stroke-width:2}
#details{border:1px solid #ccc;border-radius:4px;padding:8px;min-width:300px;max-width:420px;background:#fafafa;white-space:pre-wrap}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0}.why-fixed{color:#666}.why-chosen{color:#b35c00}.why-proven{color:#2a7a2a}
.changed rect{stroke:#d00;stroke-width:3}.legend span{display:inline-block;margin-right:10px}
.ws span.item{text-decoration:underline dotted}.ws li{margin:1px 0}
.sw{display:inline-block;width:10px;height:10px;margin-right:3px;vertical-align:middle}
"""

JS = """
function show(el){var d=document.getElementById('details');if(!d)return;
  document.querySelectorAll('.sel').forEach(function(s){s.classList.remove('sel')});el.classList.add('sel');
  d.textContent=el.getAttribute('data-kind')+' '+el.getAttribute('data-key')+'\\n'+el.getAttribute('data-value')+
    '\\nowner: '+el.getAttribute('data-owner')+'\\ncontract: '+el.getAttribute('data-origin')+
    '\\nwhy: '+el.getAttribute('data-why')+(el.getAttribute('data-note')?'\\n'+el.getAttribute('data-note'):'');}
document.querySelectorAll('.item').forEach(function(el){
  el.addEventListener('click',function(){show(el)});
  el.addEventListener('keydown',function(e){if(e.key==='Enter')show(el)});
});
// page.html#KEY opens with that item selected (a link to one claim; the README's picture)
if(location.hash.length>1){var k=decodeURIComponent(location.hash.slice(1));
  document.querySelectorAll('.item').forEach(function(el){if(el.getAttribute('data-key')===k)show(el)});}
"""

_e = html.escape


def colors(placement: dict) -> dict[str, str]:
    """instance -> color, in order of first appearance (roles by warp, then the rest)."""
    names: list[str] = []
    for r in placement["roles"]:
        names.append(r["instance"])
    for item in placement["claims"] + placement["barriers"] + placement["workspaces"]:
        for o in _instances(item["owner"]):
            names.append(o)
    out: dict[str, str] = {}
    for n in names:
        out.setdefault(n, PALETTE[len(out) % len(PALETTE)])
    return out


def _instances(owner: dict) -> list[str]:
    if "instance" in owner:
        return [str(owner["instance"])]
    return [n for v in owner.values() if isinstance(v, dict) for n in _instances(v)]


def _color(owner: dict, cmap: dict[str, str]) -> str:
    names = _instances(owner)
    return cmap.get(names[0], "#999") if names else "#999"


def _origins(item: dict) -> str:
    return "; ".join(origin_text(o) for o in item["origins"]) or "(the linker)"


def _why_class(why: str) -> str:
    return {"fixed": "why-fixed", "chosen": "why-chosen"}.get(why, "why-proven")


def item_attrs(kind: str, key: str, value: str, item: dict, note: str = "") -> str:
    """The data-* attributes every drawn item carries (the details box and the tests read them)."""
    attrs = {"class": "item", "tabindex": "0", "data-kind": kind, "data-key": key, "data-value": value,
             "data-owner": owner_text(item["owner"]), "data-origin": _origins(item), "data-why": str(item["why"])}
    if note:
        attrs["data-note"] = note
    return " ".join(f'{k}="{_e(v)}"' for k, v in attrs.items())


def _title(kind: str, key: str, value: str, item: dict, note: str = "") -> str:
    text = f"{kind} {key}: {value}\nowner: {owner_text(item['owner'])}\ncontract: {_origins(item)}\nwhy: {item['why']}"
    return f"<title>{_e(text + (chr(10) + note if note else ''))}</title>"


def claim_value(c: dict) -> str:
    return f"[{c['offset']} .. {c['offset'] + c['bytes']}) {c['bytes']} B, phase {c['phase']}"


def reuse_notes(placement: dict) -> dict[str, str]:
    """claim key -> the claims of other phases that use some of its bytes."""
    out: dict[str, str] = {}
    claims = placement["claims"]
    for a in claims:
        shared = [b["key"] + f" (phase {b['phase']})" for b in claims
                  if b is not a and KERNEL_PHASE not in (a["phase"], b["phase"]) and a["phase"] != b["phase"]
                  and a["offset"] < b["offset"] + b["bytes"] and b["offset"] < a["offset"] + a["bytes"]]
        if shared:
            out[a["key"]] = "reuses bytes of " + ", ".join(shared)
    return out


def _byte_scale(claims: list[dict], top: int):
    """Piecewise-linear y for a byte offset: MIN_SEGMENT px per range between boundaries, the rest by size."""
    bounds = sorted({0, top, *(c["offset"] for c in claims), *(c["offset"] + c["bytes"] for c in claims)})
    n = max(1, len(bounds) - 1)
    spare = max(0, SMEM_HEIGHT - MIN_SEGMENT * n)
    ys, y = {}, 0.0
    for i, b in enumerate(bounds):
        ys[b] = y
        if i + 1 < len(bounds):
            y += MIN_SEGMENT + spare * (bounds[i + 1] - b) / max(1, top)
    return ys, bounds


def smem_svg(placement: dict, cmap: dict[str, str], changed: frozenset[str] = frozenset(), width: int = 560,
             others: tuple[dict, ...] = ()) -> str:
    """others: placements drawn beside this one (diff-map): one byte scale for all, so that a
    byte sits at the same height in each."""
    claims = placement["claims"]
    scale = [c for p in (placement, *others) for c in p["claims"]]
    top = max([p["dynamic_smem"] for p in (placement, *others)] + [1] + [c["offset"] + c["bytes"] for c in scale])
    ys, _ = _byte_scale(scale, top)
    bounds = sorted({0, top, *(c["offset"] for c in claims), *(c["offset"] + c["bytes"] for c in claims)})
    columns = [p for p in placement["phases"] if p != KERNEL_PHASE] or [KERNEL_PHASE]
    left, head = 70, 20
    colw = (width - left - 10) / len(columns)
    notes = reuse_notes(placement)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{SMEM_HEIGHT + head + 10}" '
           f'role="img" aria-label="shared memory of {_e(placement["kernel"])}">']
    for i, p in enumerate(columns):
        x = left + i * colw
        out.append(f'<text x="{x + colw / 2:.1f}" y="13" text-anchor="middle">phase {_e(p)}</text>')
        out.append(f'<rect x="{x:.1f}" y="{head}" width="{colw:.1f}" height="{SMEM_HEIGHT}" fill="#f6f6f6" stroke="#ddd"/>')
    last = -99.0
    for b in bounds:
        y = head + ys[b]
        if y - last >= 11 or b == bounds[-1]:
            out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{b}</text>')
            out.append(f'<line x1="{left - 2}" x2="{left}" y1="{y:.1f}" y2="{y:.1f}" stroke="#888"/>')
            last = y
    for c in claims:
        if c["phase"] == KERNEL_PHASE or c["phase"] not in columns:
            x0, x1 = left, left + colw * len(columns)
        else:
            i = columns.index(c["phase"])
            x0, x1 = left + i * colw, left + (i + 1) * colw
        y0, y1 = head + ys[c["offset"]], head + ys[c["offset"] + c["bytes"]]
        value, note = claim_value(c), notes.get(c["key"], "")
        cls = ' class="item changed"' if c["key"] in changed else ""
        attrs = item_attrs("claim", c["key"], value, c, note)
        if cls:
            attrs = attrs.replace('class="item"', cls.strip())
        out.append(f"<g {attrs}>{_title('claim', c['key'], value, c, note)}"
                   f'<rect x="{x0 + 2:.1f}" y="{y0:.1f}" width="{x1 - x0 - 4:.1f}" height="{max(1.0, y1 - y0):.1f}" '
                   f'fill="{_color(c["owner"], cmap)}" fill-opacity="{0.55 if c.get("ring") else 0.85}" stroke="#fff"/>')
        if y1 - y0 >= 12:
            out.append(f'<text x="{x0 + 6:.1f}" y="{(y0 + y1) / 2 + 4:.1f}" fill="#000">{_e(c["key"])} · {c["bytes"]} B</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def warps_svg(placement: dict, cmap: dict[str, str]) -> str:
    warps = max(placement["warps"], 1)
    cell, left = 26, 4
    width = max(left + warps * cell + 10, 520)  # the footer line fits a small block too
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="96" role="img" aria-label="warps">']
    for g, budget in enumerate(placement["warp_group_budgets"]):
        x = left + 4 * g * cell
        out.append(f'<rect x="{x}" y="52" width="{4 * cell - 2}" height="18" fill="#eee" stroke="#bbb"/>'
                   f'<text x="{x + 2 * cell}" y="65" text-anchor="middle">group {g}: {budget} regs</text>')
    for w in range(warps):
        out.append(f'<text x="{left + w * cell + cell / 2}" y="12" text-anchor="middle" fill="#777">{w}</text>')
    for r in placement["roles"]:
        x = left + r["warp_begin"] * cell
        value = (f"warps {r['warp_begin']}..{r['warp_begin'] + r['warps'] - 1}, budget {r['budget']} registers "
                 f"(contract regs {r.get('regs')}, trial compile {r.get('trial_registers')})")
        label = f"{r['instance']} · {r['budget']}"
        out.append(f"<g {item_attrs('role', r['instance'], value, r)}>{_title('role', r['instance'], value, r)}"
                   f'<rect x="{x}" y="18" width="{r["warps"] * cell - 2}" height="30" fill="{_color(r["owner"], cmap)}"/>'
                   f'<text x="{x + 4}" y="37" fill="#fff">{_e(_fit(label, r["instance"], r["warps"] * cell - 6))}</text></g>')
    setmax = "setmaxnreg moves registers between warp groups" if placement.get("setmaxnreg") else "no setmaxnreg (one budget)"
    out.append(f'<text x="{left}" y="88" fill="#555">{placement["threads"]} threads; {_e(setmax)}; '
               f'{placement.get("entry_registers", "?")} registers at entry</text></svg>')
    return "".join(out)


def barriers_svg(placement: dict, cmap: dict[str, str]) -> str:
    cell = 36
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{BAR_SYNC_IDS * cell + 8}" height="56" role="img" aria-label="named barriers">',
           f'<rect x="2" y="16" width="{cell - 2}" height="24" fill="#ddd"/><text x="{cell / 2}" y="32" text-anchor="middle">sync</text>']
    by_id = {b["id"]: b for b in placement["barriers"]}
    for i in range(BAR_SYNC_IDS):
        out.append(f'<text x="{2 + i * cell + cell / 2}" y="12" text-anchor="middle" fill="#777">{i}</text>')
        if i in by_id:
            b = by_id[i]
            value = f"id {i}, {b.get('threads', '?')} threads"
            out.append(f"<g {item_attrs('barrier', b['key'], value, b)}>{_title('barrier', b['key'], value, b)}"
                       f'<rect x="{2 + i * cell}" y="16" width="{cell - 2}" height="24" fill="{_color(b["owner"], cmap)}"/>'
                       f'<text x="{2 + i * cell + 3}" y="32" fill="#fff">{_e(_fit(b["key"].rsplit(".", 1)[-1], "", cell - 4))}</text></g>')
        elif i:
            out.append(f'<rect x="{2 + i * cell}" y="16" width="{cell - 2}" height="24" fill="none" stroke="#ccc"/>')
    out.append("</svg>")
    return "".join(out)


def rings_svg(placement: dict, cmap: dict[str, str]) -> str:
    rings = placement["rings"]
    if not rings:
        return '<p class="sub">no rings</p>'
    cell, left = 22, 110
    most = max(max(r["range"][1], r["depth"]) for r in rings)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + most * cell + 170}" height="{len(rings) * 30 + 6}" '
           'role="img" aria-label="rings">']
    for n, r in enumerate(rings):
        y = 4 + n * 30
        value = f"depth {r['depth']} (contracts allow {r['range'][0]}..{r['range'][1]}), {r['stage_bytes']} B per stage"
        out.append(f"<g {item_attrs('ring', r['name'], value, r)}>{_title('ring', r['name'], value, r)}"
                   f'<text x="0" y="{y + 16}">{_e(r["name"])}</text>')
        for d in range(most):
            if d < r["depth"]:
                out.append(f'<rect x="{left + d * cell}" y="{y}" width="{cell - 3}" height="22" fill="{_color(r["owner"], cmap)}"/>')
            elif d < r["range"][1]:
                out.append(f'<rect x="{left + d * cell}" y="{y}" width="{cell - 3}" height="22" fill="none" stroke="#bbb" stroke-dasharray="3 2"/>')
        out.append(f'<text x="{left + most * cell + 6}" y="{y + 16}">{r["depth"]} × {r["stage_bytes"]} B</text></g>')
    out.append("</svg>")
    return "".join(out)


def _row(kind: str, key: str, value: str, item: dict) -> str:
    why = str(item["why"])
    return (f'<tr data-kind="{_e(kind)}" data-key="{_e(key)}"><td>{_e(kind)}</td><td>{_e(key)}</td><td>{_e(value)}</td>'
            f'<td>{_e(owner_text(item["owner"]))}</td><td>{_e(_origins(item))}</td>'
            f'<td class="{_why_class(why)}">{_e(why)}</td></tr>')


def items_table(placement: dict) -> str:
    rows = [_row("claim", c["key"], claim_value(c), c) for c in placement["claims"]]
    rows += [_row("barrier", b["key"], f"id {b['id']}", b) for b in placement["barriers"]]
    rows += [_row("role", r["instance"], f"warps {r['warp_begin']}..{r['warp_begin'] + r['warps'] - 1}, "
                                         f"{r['budget']} registers", r) for r in placement["roles"]]
    rows += [_row("ring", r["name"], f"depth {r['depth']} of {r['range'][0]}..{r['range'][1]}, "
                                     f"{r['stage_bytes']} B/stage", r) for r in placement["rings"]]
    rows += [_row("workspace", w["key"], f"{w['bytes']} B, align {w.get('align', '?')}"
                                         + (", zeroed" if w.get("zero") else "") + f", scope {w.get('scope', 'instance')}", w)
             for w in placement["workspaces"]]
    return ("<table><tr><th>kind</th><th>item</th><th>value</th><th>owner</th><th>contract</th><th>why</th></tr>"
            + "".join(rows) + "</table>")


def workspaces_list(placement: dict) -> str:
    """One line per buffer: a kernel-scope workspace is one buffer however many instances declare it."""
    if not placement["workspaces"]:
        return '<p class="sub">no workspaces</p>'
    groups: dict[str, list[dict]] = {}
    for w in placement["workspaces"]:
        shared = w.get("scope") == "kernel"
        groups.setdefault(f"{w['name']} (kernel scope)" if shared else w["key"], []).append(w)
    lines = []
    for title, decls in groups.items():
        w = decls[0]
        value = f"{w['bytes']} B" + (", zeroed" if w.get("zero") else "") + f", align {w.get('align', '?')}"
        who = ", ".join(f"<span {item_attrs('workspace', d['key'], value, d)}>{_e(d['owner'].get('instance', '?'))}</span>"
                        for d in decls)
        lines.append(f"<li><b>{_e(title)}</b>: {_e(value)}; declared by {who}</li>")
    return '<ul class="ws">' + "".join(lines) + "</ul>"


def _fit(text: str, short: str, width: float) -> str:
    """`text`, else `short`, else `text` cut to what `width` px of 11px type hold."""
    chars = int(width // 6.6)
    for t in (text, short):
        if t and len(t) <= chars:
            return t
    return text[:max(1, chars - 1)] + "…" if len(text) > chars else text


def legend(cmap: dict[str, str]) -> str:
    return '<div class="legend">' + "".join(
        f'<span><i class="sw" style="background:{c}"></i>{_e(n)}</span>' for n, c in cmap.items()) + "</div>"


def header(placement: dict) -> str:
    s = placement.get("solver", {})
    return (f"<h1>{_e(placement['kernel'])} <small>({_e(str(placement.get('arch', '')))})</small></h1>"
            f'<div class="sub">{placement["threads"]} threads · {placement["dynamic_smem"]} B dynamic shared memory '
            f'(+{placement.get("static_smem", 0)} B static, {placement.get("smem_capacity", "?")} B on the SM) · '
            f'placement {_e(str(s.get("why", "?")))}</div>')


def page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head><body>\n{body}\n<script>{JS}</script></body></html>\n")


def render_map(placement: dict) -> str:
    cmap = colors(placement)
    body = [header(placement), legend(cmap),
            '<div class="grid"><div><h2>Shared memory (bytes down, phases across)</h2>',
            '<div class="sub">a claim of phase kernel spans every phase; side by side, claims reuse bytes</div>',
            smem_svg(placement, cmap),
            '</div><div><h2>Details</h2><div id="details">click a claim, barrier, role or ring</div>',
            "<h2>Warps and register budgets</h2>", warps_svg(placement, cmap),
            "<h2>Named barriers</h2>", barriers_svg(placement, cmap),
            "<h2>Rings</h2>", rings_svg(placement, cmap),
            "<h2>Workspaces (global memory the runtime lends per launch)</h2>", workspaces_list(placement),
            "</div></div>", "<h2>Everything placed</h2>", items_table(placement)]
    return page(f"{placement['kernel']}: SM placement", "\n".join(body))
