"""Kernel-scope workspaces ([workspace.X] scope = "kernel", issue 9): parsing, L-WORKSPACE on
disagreeing declarations, and one runtime buffer per name (no GPU)."""

from types import SimpleNamespace

import pytest

from pipelink.linker.check import check_shared_workspaces
from pipelink.linker.check_types import Diags
from pipelink.linker.contract import parse_contract_text
from pipelink.common.diagnostics import Rejected
from pipelink.runtime.workspace import Arena, Workspace

BASE = """
[component]
name = "c{n}"
kind = "role"
entry = "run"
[role]
warps = 4
[params]
t = "u32"
[workspace.xs]
bytes = "{bytes}"
scope = "{scope}"
"""


def _contract(n, bytes_="t * 4", scope="kernel"):
    return parse_contract_text(BASE.format(n=n, bytes=bytes_, scope=scope), f"c{n}.contract.toml")


def test_scope_parses_and_defaults_to_instance():
    assert _contract(1).workspaces[0].scope == "kernel"
    assert _contract(1, scope="instance").workspaces[0].scope == "instance"


def test_unknown_scope_is_c_schema():
    with pytest.raises(Rejected) as e:
        _contract(1, scope="grid")
    assert e.value.diagnostics[0].code == "C-SCHEMA"


def _diags(*contracts):
    comp = SimpleNamespace(instances=[SimpleNamespace(name=f"i{k}", contract=c, package=SimpleNamespace(name=c.name))
                                      for k, c in enumerate(contracts)])
    d = Diags()
    check_shared_workspaces(comp, d)
    return [x.code for x in d.items]


def test_agreeing_declarations_link():
    assert _diags(_contract(1), _contract(2, bytes_="t  *  4")) == []


@pytest.mark.parametrize("other", [dict(bytes_="t * 8"), dict(scope="instance")])
def test_disagreeing_declarations_are_l_workspace(other):
    assert _diags(_contract(1), _contract(2, **other)) == ["L-WORKSPACE"]


def test_arena_lends_one_buffer_per_kernel_scope_name():
    allocs = []
    arena = Arena(lambda n: allocs.append(n) or 0x1000 * len(allocs), lambda p: None, lambda p, n: None)
    a = Workspace("@ws:a.xs", "a", "xs", "t * 4", False, 256, "kernel")
    b = Workspace("@ws:b.xs", "b", "xs", "t * 4", False, 256, "kernel")
    c = Workspace("@ws:c.xs", "c", "xs", "t * 4", False, 256)
    assert arena.pointer(a, 64) == arena.pointer(b, 64) != arena.pointer(c, 64)
    assert len(allocs) == 2


# ---- caller-lent workspaces (Kernel.open(..., workspaces={name: (ptr, bytes)}), issue 13) ----

def _lend_manifest():
    from pipelink.runtime import Manifest
    fields = [{"instance": "a", "name": "t", "type": "u32", "offset": 0},
              {"instance": "a", "name": "@ws:a.xs", "type": "ptr", "offset": 8},
              {"instance": "b", "name": "@ws:b.xs", "type": "ptr", "offset": 16},
              {"instance": "b", "name": "@ws:b.own", "type": "ptr", "offset": 24}]
    return Manifest.from_dict({
        "kernel": "k", "block": [128, 1, 1], "grid": [4, 1, 1],
        "params": {"size": 32, "by_name": {f["name"]: f["type"] for f in fields}, "fields": fields},
        "workspaces": [{"param": "@ws:a.xs", "instance": "a", "name": "xs", "bytes": "t * 4", "zero": True,
                        "align": 256, "scope": "kernel"},
                       {"param": "@ws:b.xs", "instance": "b", "name": "xs", "bytes": "t * 4", "zero": True,
                        "align": 256, "scope": "kernel"},
                       {"param": "@ws:b.own", "instance": "b", "name": "own", "bytes": "t", "zero": False,
                        "align": 16}],
    })


def _plan(lent, t=100):
    from pipelink.runtime import plan_launch
    allocated = []
    p = plan_launch(_lend_manifest(), {"t": t}, builtins={"num_sms": 1, "resident_ctas": 1},
                    workspace=lambda w, n: allocated.append(w.key) or 0x7000, lent=lent)
    ptr = lambda off: int.from_bytes(p.params[off:off + 8], "little")  # noqa: E731
    return ptr(8), ptr(16), ptr(24), allocated


def test_lent_kernel_scope_workspace_replaces_the_allocation():
    a, b, own, allocated = _plan({"xs": (0x10000, 400)})
    assert a == b == 0x10000 and own == 0x7000 and allocated == ["@ws:b.own"]
    a, b, own, allocated = _plan({"b.own": (0x20010, 100)})  # an instance's own: "<instance>.<name>"
    assert own == 0x20010 and a == b == 0x7000


@pytest.mark.parametrize("lent, why", [
    ({"xs": (0x10000, 399)}, "has 399 bytes; this launch needs 400"),
    ({"xs": (0x10080, 4096)}, "not 256-byte aligned"),
    ({"ys": (0x10000, 4096)}, "no workspace 'ys'"),
    ({"own": (0x10000, 4096)}, "no workspace 'own'"),            # instance scope needs "b.own"
    ({"xs": (0, 4096)}, "no device buffer"),
    ({"xs": (0x10000, 0)}, "no device buffer"),
    ({"xs": 0x10000}, "not (pointer, bytes)"),
    ({"xs": (0x10000, True)}, "not (pointer, bytes)"),
    ([("xs", (0x10000, 400))], "must be a dict"),
])
def test_bad_lent_workspaces_are_r_workspace(lent, why):
    from pipelink.runtime import LaunchError
    with pytest.raises(LaunchError) as e:
        _plan(lent)
    assert e.value.code == "R-WORKSPACE" and why in str(e.value) and e.value.diagnostics[0].hint


def test_lent_tensor_counts_its_bytes():
    class T:  # a stand-in for a contiguous CUDA tensor
        is_cuda = True
        def data_ptr(self): return 0x40000
        def numel(self): return 100
        def element_size(self): return 4
        def is_contiguous(self): return True
    assert _plan({"xs": T()})[:2] == (0x40000, 0x40000)


def test_workspace_buffers_lend_to_a_kernel_of_the_same_workspaces():
    """Kernel.workspace_buffers names a kernel's workspace buffers as `workspaces=` takes them, so
    another build of the kernel can run on them (moe_bench pair: each build on the other's buffers)."""
    from pipelink.runtime import Kernel
    m = _lend_manifest()
    assert Kernel.workspace_buffers(SimpleNamespace(_arena=None, manifest=m)) == {}  # nothing launched yet
    allocs = []
    arena = Arena(lambda n: allocs.append(n) or 0x100000 * len(allocs), lambda p: None, lambda p, n: None)
    xs, own = m.workspaces[0], m.workspaces[2]
    arena.pointer(xs, 400)
    arena.pointer(own, 100)
    bufs = Kernel.workspace_buffers(SimpleNamespace(_arena=arena, manifest=m))
    assert bufs == {"xs": (0x100000, 400), "b.own": (0x200000, 100)}
    a, b, own_ptr, allocated = _plan(bufs)
    assert (a, b, own_ptr, allocated) == (0x100000, 0x100000, 0x200000, [])
