"""Kernel-scope workspaces ([workspace.X] scope = "kernel", issue 9): parsing, L-WORKSPACE on
disagreeing declarations, and one runtime buffer per name (no GPU)."""

from types import SimpleNamespace

import pytest

from pipelink.check import _Diags, _check_shared_workspaces
from pipelink.contract import parse_contract_text
from pipelink.diagnostics import Rejected
from pipelink.workspace import Arena, Workspace

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
    d = _Diags()
    _check_shared_workspaces(comp, d)
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
