"""`pipelink link --placement`, `pipelink map --html` and `pipelink diff-map`: the placement JSON
holds every decision with its owner and contract line, the page shows every one of them, the
diff names what moved, and bad input is a coded error that leaves no output behind. CPU only;
the last test renders the page in headless Chromium when it is installed."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pipelink.linker import cli
from pipelink.linker.link import write_outputs
from pipelink.linker.map_diff import diff
from pipelink.linker.map_html import render_map
from pipelink.linker.placement import make_placement, read_placement


class Items(HTMLParser):
    """Every element carrying data-kind/data-key: the drawn items and the table rows."""

    def __init__(self):
        super().__init__()
        self.items: list[dict] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "data-kind" in a:
            self.items.append({"tag": tag, **a})

    def handle_data(self, data):
        self.text.append(data)


def parse(page: str) -> Items:
    p = Items()
    p.feed(page)
    return p


KINDS = (("claim", "claims", "key"), ("barrier", "barriers", "key"), ("role", "roles", "instance"),
         ("ring", "rings", "name"), ("workspace", "workspaces", "key"))


def assert_every_item_shown(placement: dict, page: str) -> None:
    items = parse(page).items
    for kind, field, keyf in KINDS:
        for entry in placement[field]:
            key = str(entry[keyf])
            drawn = [i for i in items if i["data-kind"] == kind and i["data-key"] == key and i["tag"] != "tr"]
            rows = [i for i in items if i["data-kind"] == kind and i["data-key"] == key and i["tag"] == "tr"]
            assert drawn and rows, f"{kind} {key} is not drawn and listed"
            for origin in entry["origins"]:
                assert f"{origin['file']}:{origin['line']}" in drawn[0]["data-origin"], (kind, key)
            owners = [o for o in (entry["owner"], *entry["owner"].values()) if isinstance(o, dict) and "instance" in o]
            assert owners and all(o["instance"] in drawn[0]["data-owner"] for o in owners), (kind, key)
            assert drawn[0]["data-why"] in ("fixed", "chosen", "proven optimal")


@pytest.fixture(scope="module")
def toy_placement(toy_linked, tmp_path_factory):
    d = tmp_path_factory.mktemp("placement")
    res = toy_linked
    paths = {"cubin": d / "toy.cubin", "manifest": d / "toy.manifest.json", "placement": d / "toy.placement.json"}
    contract = res.checked.comp.instance("cons").contract.file
    write_outputs(res, **{k: str(v) for k, v in paths.items()}, labels={contract: "//examples/toy:consumer"})
    return paths["placement"]


def test_placement_holds_every_decision(toy_placement, toy_linked):
    p = read_placement(toy_placement)
    assert p["kernel"] == "toy" and p["solver"]["why"] == "proven optimal"
    pl = toy_linked.placement
    assert {c["key"]: c["offset"] for c in p["claims"]} == pl.offsets
    assert {b["key"]: b["id"] for b in p["barriers"]} == pl.barrier_ids
    assert {r["instance"]: (r["warp_begin"], r["budget"]) for r in p["roles"]} == \
        {n: (pl.warp_begin[n], pl.budgets[n]) for n in pl.warp_begin}
    assert {r["name"]: r["depth"] for r in p["rings"]} == pl.depths
    scratch = next(c for c in p["claims"] if c["key"] == "cons.smem.scratch")
    assert scratch["phase"] == "combine" and scratch["owner"] == {"instance": "cons", "package": "consumer"}
    assert scratch["origins"][0]["line"] > 0 and scratch["origins"][0]["label"] == "//examples/toy:consumer"
    assert p["phases"] == ["kernel", "combine"]
    # Deterministic: the same link gives the same bytes.
    assert make_placement(toy_linked.checked, pl, toy_linked.report["resource_usage"],
                          {toy_linked.checked.comp.instance("cons").contract.file: "//examples/toy:consumer"}) == p


def test_map_page_shows_every_item(toy_placement, tmp_path, capsys):
    out = tmp_path / "toy.html"
    assert cli.main(["map", str(toy_placement), "--html", str(out)]) == 0
    page = out.read_text()
    p = read_placement(toy_placement)
    assert_every_item_shown(p, page)
    assert "//examples/toy:consumer" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in page
    assert cli.main(["map", str(toy_placement), "--html", str(tmp_path / "again.html")]) == 0
    assert (tmp_path / "again.html").read_bytes() == out.read_bytes()  # deterministic
    capsys.readouterr()


def two_phase_placement() -> dict:
    """A placement with two phases reusing bytes, a kernel-long claim, and workspaces."""
    src = {"file": "k/a.contract.toml", "line": 7}
    own = {"instance": "a", "package": "pa"}
    return {
        "format": 1, "kind": "pipelink.linker.placement", "kernel": "two", "arch": "sm_90a", "threads": 256, "warps": 8,
        "dynamic_smem": 4160, "static_smem": 0, "smem_capacity": 232448, "registers": 128, "entry_registers": 128,
        "setmaxnreg": True, "warp_group_budgets": [40, 232], "solver": {"why": "chosen", "proven_optimal": False},
        "phases": ["kernel", "load", "store"],
        "claims": [
            {"key": "a.smem.bars", "offset": 4096, "bytes": 64, "align": 8, "phase": "kernel", "owner": own,
             "origins": [src], "why": "chosen", "kind": "smem", "size": "fixed"},
            {"key": "a.smem.in", "offset": 0, "bytes": 4096, "align": 128, "phase": "load", "owner": own,
             "origins": [src], "why": "chosen", "kind": "smem", "size": "fixed"},
            {"key": "a.smem.out", "offset": 0, "bytes": 2048, "align": 128, "phase": "store", "owner": own,
             "origins": [{"file": "k/a.contract.toml", "line": 12}], "why": "chosen", "kind": "smem", "size": "fixed"}],
        "barriers": [{"key": "a.sync", "id": 1, "threads": 128, "owner": own, "origins": [src], "why": "chosen"}],
        "roles": [{"instance": "a", "warp_begin": 0, "warps": 8, "budget": 232, "regs": [24, 232], "owner": own,
                   "origins": [src], "why": "chosen", "warpgroup_aligned": True, "trial_registers": 90}],
        "rings": [],
        "workspaces": [{"key": "a.flags", "name": "flags", "bytes": "4 * grid_x", "zero": True, "align": 256,
                        "scope": "instance", "owner": own, "origins": [{"file": "k/a.contract.toml", "line": 20}],
                        "why": "fixed"}],
    }


def test_phases_and_workspaces_are_drawn(tmp_path):
    p = two_phase_placement()
    page = render_map(p)
    assert_every_item_shown(p, page)
    items = {i["data-key"]: i for i in parse(page).items if i["tag"] == "g"}
    assert "reuses bytes of a.smem.out (phase store)" in items["a.smem.in"]["data-note"]
    assert "phase load" in page and "phase store" in page and "group 1: 232 regs" in page


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_diff_map_names_what_moved(tmp_path, capsys):
    a = two_phase_placement()
    b = copy.deepcopy(a)
    b["claims"][1]["offset"] = 128
    b["claims"][1]["bytes"] = 3968
    b["barriers"][0]["id"] = 3
    b["roles"][0]["budget"] = 200
    b["warp_group_budgets"] = [40, 200]
    b["workspaces"] = []
    b["rings"] = [{"name": "r", "depth": 4, "range": [2, 8], "stage_bytes": 512, "owner": {},
                   "origins": [], "why": "chosen"}]
    got = {(c.kind, c.key, c.what) for c in diff(a, b)}
    assert got == {("claim", "a.smem.in", "offset"), ("claim", "a.smem.in", "bytes"), ("barrier", "a.sync", "id"),
                   ("role", "a", "budget"), ("kernel", "two", "warp_group_budgets"), ("workspace", "a.flags", "removed"),
                   ("ring", "r", "added")}
    fa, fb = write_json(tmp_path / "a.json", a), write_json(tmp_path / "b.json", b)
    out = tmp_path / "d.html"
    assert cli.main(["diff-map", str(fa), str(fb), "--html", str(out)]) == 0
    text = capsys.readouterr().out
    assert "~ claim a.smem.in: offset 0 -> 128" in text and "~ barrier a.sync: id 1 -> 3" in text
    assert "~ role a: budget 232 -> 200" in text and "- workspace a.flags" in text and "+ ring r" in text
    page = out.read_text()
    changed = [i for i in parse(page).items if i["tag"] == "g" and "changed" in i["class"]]
    assert {i["data-key"] for i in changed} == {"a.smem.in"}
    assert cli.main(["diff-map", str(fa), str(fa)]) == 0
    assert "no placement changes" in capsys.readouterr().out
    c = copy.deepcopy(a)
    c["kernel"] = "other"
    assert cli.main(["--format=json", "diff-map", str(fa), str(write_json(tmp_path / "c.json", c))]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["same_kernel"] is False and doc["changes"] == []


@pytest.mark.parametrize("content, code", [
    (None, "E-FILE"),
    ("not json", "E-PLACEMENT"),
    ('{"format": 1, "kernel": "toy"}', "E-PLACEMENT"),  # a manifest, not a placement
    ('{"format": 9, "kind": "pipelink.linker.placement"}', "E-PLACEMENT"),
    ('{"format": 1, "kind": "pipelink.linker.placement", "kernel": "k", "threads": 1, "warps": 1, "dynamic_smem": 0, '
     '"phases": [], "warp_group_budgets": [], "claims": [{"key": "x"}]}', "E-PLACEMENT"),
])
def test_bad_placement_is_a_coded_error_and_writes_nothing(tmp_path, capsys, content, code):
    src = tmp_path / "in.json"
    if content is not None:
        src.write_text(content)
    out = tmp_path / "o" / "map.html"
    for argv in (["map", str(src), "--html", str(out)], ["diff-map", str(src), str(src), "--html", str(out)]):
        assert cli.main(["--format=json", *argv]) == 1
        doc = json.loads(capsys.readouterr().out)
        assert [d["code"] for d in doc["diagnostics"]] == [code] and doc["diagnostics"][0]["hint"]
        assert not out.exists() and not (tmp_path / "o").exists()


def _damaged(path: tuple, value) -> dict:
    p = two_phase_placement()
    p["rings"] = [{"name": "r", "depth": 4, "range": [2, 8], "stage_bytes": 512,
                   "owner": {"producer": {"instance": "a", "package": "pa"}, "consumer": {"instance": "a", "package": "pa"}},
                   "origins": [], "why": "chosen"}]
    t = p
    for k in path[:-1]:
        t = t[k]
    if value is _DROP:
        del t[path[-1]]
    else:
        t[path[-1]] = value
    return p


_DROP = object()
# One damage per class the reader let through to the renderer (E-INTERNAL, or a MemoryError or
# an out-of-memory kill for a count the pages loop over): a name that is not a string, a count
# beyond what a link writes, a ring range of another shape, a solver that is not an object.
DAMAGED_FIELDS = {
    "claim key not a string": (("claims", 0, "key"), -1),
    "claim key a list": (("claims", 0, "key"), []),
    "claim offset negative": (("claims", 0, "offset"), -1),
    "claim bytes beyond u32": (("claims", 0, "bytes"), 2**70),
    "claim phase not a string": (("claims", 0, "phase"), None),
    "barrier key null": (("barriers", 0, "key"), None),
    "barrier id beyond 15": (("barriers", 0, "id"), 16),
    "role instance a list": (("roles", 0, "instance"), []),
    "role warps 2^70": (("roles", 0, "warps"), 2**70),
    "role warps past the block": (("roles", 0, "warp_begin"), 30),
    "role budget a string": (("roles", 0, "budget"), "232"),
    "ring name a number": (("rings", 0, "name"), 0),
    "ring depth 2^70": (("rings", 0, "depth"), 2**70),
    "ring range null": (("rings", 0, "range"), None),
    "ring range a string": (("rings", 0, "range"), "x"),
    "ring range of strings": (("rings", 0, "range"), ["", 8]),
    "ring range of one": (("rings", 0, "range"), [2]),
    "ring range 2^70": (("rings", 0, "range"), [2, 2**70]),
    "workspace key a number": (("workspaces", 0, "key"), 0),
    "workspace name dropped": (("workspaces", 0, "name"), _DROP),
    "workspace bytes dropped": (("workspaces", 0, "bytes"), _DROP),
    "workspace owner instance an object": (("workspaces", 0, "owner"), {"instance": {}}),
    "owner instance a number": (("claims", 0, "owner"), {"instance": 1}),
    "origin label a list": (("claims", 0, "origins"), [{"file": "a", "line": 1, "label": []}]),
    "warps 2^70": (("warps",), 2**70),
    "threads negative": (("threads",), -1),
    "budgets of 2^70": (("warp_group_budgets",), [2**70]),
    "solver a string": (("solver",), "x"),
    "solver true": (("solver",), True),
}


@pytest.mark.parametrize("case", sorted(DAMAGED_FIELDS))
def test_damaged_placement_field_is_e_placement(tmp_path, capsys, case):
    """Every field map/diff-map read is checked by type and bound on reading: E-PLACEMENT naming
    the field, exit 1, no page written (map, and diff-map on either side)."""
    path, value = DAMAGED_FIELDS[case]
    if path[-1] == "name" and path[0] == "workspaces":
        p = _damaged(("workspaces", 0, "scope"), "kernel")  # a kernel-scope buffer is listed by its name
        del p["workspaces"][0]["name"]
    else:
        p = _damaged(path, value)
    good = write_json(tmp_path / "good.json", _damaged(("kernel",), "two"))
    src = write_json(tmp_path / "bad.json", p)
    out = tmp_path / "o" / "map.html"
    for argv in (["map", str(src), "--html", str(out)], ["diff-map", str(good), str(src), "--html", str(out)],
                 ["diff-map", str(src), str(good)]):
        assert cli.main(["--format=json", *argv]) == 1, argv
        doc = json.loads(capsys.readouterr().out)
        assert [d["code"] for d in doc["diagnostics"]] == ["E-PLACEMENT"] and doc["diagnostics"][0]["hint"], doc
        assert str(path[0]) in doc["diagnostics"][0]["message"]
        assert not out.exists() and not (tmp_path / "o").exists()
    assert cli.main(["map", str(good), "--html", str(out)]) == 0  # the undamaged one still renders
    capsys.readouterr()


def test_map_output_errors(tmp_path, capsys):
    p = write_json(tmp_path / "p.json", two_phase_placement())
    assert cli.main(["map", str(p), "--html", str(tmp_path)]) == 1  # a directory
    assert "E-OUTPUT" in capsys.readouterr().err
    assert cli.main(["map", str(p), "--html", str(p)]) == 1  # the input itself
    assert "E-OUTPUT" in capsys.readouterr().err and read_placement(p)["kernel"] == "two"
    assert cli.main(["map", str(p)]) == 2  # --html is required
    assert "E-USAGE" in capsys.readouterr().err


CHROMIUM = next((c for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium) to render the page")
def test_page_renders_in_headless_chromium(tmp_path):
    page = tmp_path / "two.html"
    page.write_text(render_map(two_phase_placement()))
    png = tmp_path / "two.png"
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={png}", "--window-size=1000,700", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and png.exists(), r.stderr[-2000:]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000  # a drawn page, not a blank one
    dump = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert dump.returncode == 0 and 'data-key="a.smem.in"' in dump.stdout  # the browser parsed every item


def test_diff_map_of_a_relink(toy, packer, tmp_path, capsys):
    """The consumer's owner narrows the ring's depth range: the relink moves the ring's buffer
    and barriers, and diff-map says so, citing the changed contract."""
    from pipelink.linker.compose import parse_kernel
    from pipelink.linker.link import plan
    from pipelink.linker.placement import placement_bytes

    narrow = packer.variant(toy.consumer, toy.contract_text("consumer").replace("depth = [2, 6]", "depth = [2, 3]"))
    files = []
    for name, pkgs in (("before", toy.packages), ("after", [toy.producer, narrow, toy.sink])):
        ch, pl, _, _ = plan(parse_kernel(str(toy.kernel), pkgs))
        files.append(tmp_path / f"{name}.placement.json")
        files[-1].write_bytes(placement_bytes(make_placement(ch, pl, {})))
    assert cli.main(["diff-map", *map(str, files)]) == 0
    text = capsys.readouterr().out
    assert "~ ring work: depth 6 -> 3" in text, text
    assert "~ claim ring.work.buffer: bytes 6144 -> 3072" in text and "~ kernel toy: dynamic_smem 8288 -> 5168" in text, text
    assert "~ claim ring.work.full: offset" in text


def test_link_placement_path_is_checked_before_the_link(toy, packer, tmp_path, capsys):
    pkgs = [str(packer.save(p)) for p in toy.packages]
    argv = ["link", "--kernel", str(toy.kernel), *[a for p in pkgs for a in ("--package", p)],
            "--out-dir", str(tmp_path / "out")]
    assert cli.main([*argv, "--placement", str(tmp_path)]) == 1  # a directory
    assert "E-OUTPUT" in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert cli.main([*argv, "--placement", str(tmp_path / "out" / "toy.map.txt")]) == 1  # another output
    assert "E-OUTPUT" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_special_files(tmp_path, capsys):
    import os

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert cli.main(["map", str(fifo), "--html", str(tmp_path / "m.html")]) == 1  # refused, never blocks
    assert "E-FILE" in capsys.readouterr().err and not (tmp_path / "m.html").exists()
    p = write_json(tmp_path / "p.json", two_phase_placement())
    assert cli.main(["map", str(p), "--html", "/dev/null"]) == 1
    assert "E-OUTPUT" in capsys.readouterr().err
    assert cli.main(["diff-map", str(p), "/dev/zero"]) == 1
    assert "E-FILE" in capsys.readouterr().err
