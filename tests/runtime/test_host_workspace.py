"""Host providers ([host], tmap), workspaces ([workspace.X]) and kernel-owned cluster facts:
parsing, the runtime's planning without a GPU (fake encoder and allocator)."""

import pytest

from pipelink.linker.contract import parse_contract_text
from pipelink.common.diagnostics import Rejected
from pipelink.runtime.host import HostError, HostProvider, run_providers
from pipelink.runtime import LaunchError, Manifest, plan_launch

BASE = """
[component]
name = "ld"
kind = "role"
entry = "run"
[role]
warps = 4
[params]
x = "ptr"
m = "u32"
tmap_x = "tmap"
"""
HOST = """
[host]
provider = "ld_host.py"
fills = ["tmap_x"]
reads = ["x", "m"]
"""


def test_host_clause_parses():
    c = parse_contract_text(BASE + HOST, "ld.contract.toml")
    assert c.host.fills == ("tmap_x",) and c.host.reads == ("x", "m")


@pytest.mark.parametrize("host, why", [
    ("", "need a host provider"),
    (HOST.replace('fills = ["tmap_x"]', 'fills = ["x"]'), "not a tmap parameter"),
    (HOST.replace('reads = ["x", "m"]', 'reads = ["tmap_x"]'), "not a caller-lent parameter"),
    (HOST.replace('reads = ["x", "m"]', 'reads = ["y"]'), "not a caller-lent parameter"),
    (HOST.replace('"ld_host.py"', '"../evil.py"'), "Python file name"),
    (HOST + 'facts = ["block_m"]\n', "not declared"),
])
def test_host_clause_rejections(host, why):
    with pytest.raises(Rejected) as e:
        parse_contract_text(BASE + host, "ld.contract.toml")
    assert e.value.diagnostics[0].code == "C-SCHEMA" and why in e.value.diagnostics[0].message


def test_workspace_clause_names_are_checked():
    text = BASE + HOST + '[workspace.flags]\nbytes = "m * 4"\nzero = true\n'
    assert parse_contract_text(text, "c.toml").workspaces[0].zero
    with pytest.raises(Rejected) as e:
        parse_contract_text(text.replace('"m * 4"', '"q * 4"'), "c.toml")
    assert e.value.diagnostics[0].code == "C-EXPR"


PROVIDER = HostProvider("load", "ld", "ld_host.py",
                        "def provide(lent, facts, host):\n    return {'tmap_x': host.tensor_map_2d(lent['x'], 'bf16', "
                        "rows=lent['m'], cols=64, box_rows=facts['block_m'], box_cols=64)}\n",
                        ("tmap_x",), ("x", "m"), ("block_m",))


class FakeHost:
    def __init__(self):
        self.calls = []

    def require(self, cond, msg):
        if not cond:
            raise HostError(msg)

    def tensor_map_2d(self, ptr, dtype, **kw):
        self.calls.append((ptr, dtype, kw))
        return bytes([7]) * 128


def manifest() -> Manifest:
    return Manifest.from_dict({
        "kernel": "k", "block": [128, 1, 1], "grid": ["min(resident_ctas, m)", 1, 1],
        "params": {"size": 256, "by_name": {"x": "ptr", "m": "u32", "tmap_x": "tmap", "@ws:load.flags": "ptr"},
                   "fields": [{"instance": "load", "name": "x", "type": "ptr", "offset": 0},
                              {"instance": "load", "name": "m", "type": "u32", "offset": 8},
                              {"instance": "load", "name": "tmap_x", "type": "tmap", "offset": 64},
                              {"instance": "load", "name": "@ws:load.flags", "type": "ptr", "offset": 192}]},
        "facts": {"block_m": 128},
        "host": [{"instance": "load", "package": "ld", "provider": "ld_host.py", "source": PROVIDER.source,
                  "fills": ["tmap_x"], "reads": ["x", "m"], "facts": ["block_m"]}],
        "workspaces": [{"param": "@ws:load.flags", "instance": "load", "name": "flags", "bytes": "m * 4",
                        "zero": True, "align": 256}],
    })


def test_plan_runs_providers_and_lends_workspaces():
    m = manifest()
    assert set(m.lent) == {"x", "m"}
    host, sizes = FakeHost(), []
    p = plan_launch(m, {"x": 4096, "m": 300}, builtins={"num_sms": 132, "resident_ctas": 132}, host=host,
                    workspace=lambda w, n: sizes.append(n) or 0xABC00)
    assert p.grid == (132, 1, 1) and sizes == [1200]
    assert host.calls == [(4096, "bf16", {"rows": 300, "cols": 64, "box_rows": 128, "box_cols": 64})]
    assert p.params[64:192] == bytes([7]) * 128 and int.from_bytes(p.params[192:200], "little") == 0xABC00


def test_caller_cannot_pass_a_provided_parameter():
    with pytest.raises(LaunchError) as e:
        plan_launch(manifest(), {"x": 1, "m": 1, "tmap_x": b"\0" * 128}, builtins={"resident_ctas": 1}, host=FakeHost())
    assert e.value.code == "R-PARAM"


@pytest.mark.parametrize("source, why", [
    ("def provide(lent, facts, host):\n    return {}\n", "not its region"),
    ("def provide(lent, facts, host):\n    return {'tmap_x': b'x'}\n", "a tmap is 128 bytes"),
    ("def provide(lent, facts, host):\n    raise ValueError('no')\n", "failed"),
    ("def provide(lent, facts, host):\n    host.require(False, 'k too small')\n", "k too small"),
])
def test_provider_failures_are_r_host(source, why):
    p = HostProvider("load", "ld", "ld_host.py", source, ("tmap_x",), ("x",), ())
    with pytest.raises(HostError) as e:
        run_providers([p], {"x": 1}, {}, FakeHost())
    assert e.value.code == "R-HOST" and why in e.value.diagnostics[0].message


@pytest.mark.parametrize("kw", [{"l2_promotion": 96}, {"l2_promotion": True}, {"l2_promotion": "128"},
                                {"swizzle": 48}, {"swizzle": False}, {"dtype": "bf8"}])
def test_tensor_map_2d_refuses_unsupported_settings_before_the_driver(kw):
    """A provider asking for a swizzle, L2 promotion or dtype TMA lacks gets R-HOST with the
    supported values, before any driver call (HostEncoder without a driver)."""
    from pipelink.runtime.host import HostEncoder
    args = {"dtype": "bf16", **kw}
    with pytest.raises(HostError) as e:
        HostEncoder(driver=None).tensor_map_2d(0x1000, args.pop("dtype"), rows=128, cols=64, box_rows=64,
                                               box_cols=64, **args)
    d = e.value.diagnostics[0]
    assert e.value.code == "R-HOST" and "not supported" in d.message and "l2_promotion in [0, 64, 128, 256]" in d.hint
