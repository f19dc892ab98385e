"""Workspaces: global memory the runtime lends a component instance for each launch.

A contract's [workspace.X] gives a size expression (over the component's integer
parameters, its facts and `grid_x`, the launch's grid width) and whether it must be zero
at the first launch (`zero = true`; the component promises to leave it zero, so graph
replays need no memset). The linker gives each workspace a hidden pointer field after the
instance's declared parameters (`@ws:<instance>.<name>`); the runtime sizes, allocates
(grow-only, zeroed) and fills those fields when it plans a launch. A workspace with
`scope = "kernel"` is one buffer per name for the whole kernel: every instance declaring it
gets the same pointer (components exchange data and readiness counters through it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pipelink.common.expr import ExprError, evaluate


@dataclass(frozen=True)
class Workspace:
    param: str  # the hidden field, "@ws:<instance>.<name>"
    instance: str
    name: str
    bytes: str
    zero: bool
    align: int
    scope: str = "instance"  # "kernel": one buffer per name, shared by every declaring instance

    @classmethod
    def from_dict(cls, d: Mapping) -> "Workspace":
        align, zero = d["align"], d["zero"]
        if not isinstance(align, int) or isinstance(align, bool) or not isinstance(zero, bool):
            raise TypeError(f"workspace {d['param']!r}: align must be an integer and zero a bool, not {align!r}, {zero!r}")
        w = cls(str(d["param"]), str(d["instance"]), str(d["name"]), str(d["bytes"]), zero, align,
                str(d.get("scope", "instance")))
        if not w.param.startswith("@ws:") or w.align < 1 or w.align & (w.align - 1):
            raise ValueError(f"workspace {w.param!r}: bad name or alignment {w.align}")
        if w.scope not in ("instance", "kernel"):
            raise ValueError(f"workspace {w.param!r}: unknown scope {w.scope!r}")
        return w

    @property
    def key(self) -> str:
        """The buffer this workspace uses: its own, or the kernel's one of that name."""
        return f"@kernel:{self.name}" if self.scope == "kernel" else self.param

    @property
    def lend_name(self) -> str:
        """How a caller names this workspace's buffer when lending it (`workspaces=`): a
        kernel-scope workspace by its name, an instance's own as "<instance>.<name>"."""
        return self.name if self.scope == "kernel" else f"{self.instance}.{self.name}"

    def size(self, env: Mapping[str, int]) -> int:
        """Bytes for this launch; raises ExprError when a name is missing."""
        n = evaluate(self.bytes, dict(env))
        if n < 0:
            raise ExprError(f"workspace {self.instance}.{self.name} size {self.bytes!r} = {n} is negative")
        return max(int(n), 1)


class Arena:
    """Device buffers of one kernel's workspaces: grow-only, zeroed when (re)allocated, and
    kept until `close` (a captured graph may still use an older, smaller buffer)."""

    def __init__(self, alloc, free, memset):
        self._alloc, self._free, self._memset = alloc, free, memset
        self._live: dict[str, tuple[int, int]] = {}  # param -> (pointer, bytes)
        self._retired: list[int] = []

    def pointer(self, w: Workspace, nbytes: int) -> int:
        have = self._live.get(w.key)
        if have is None or have[1] < nbytes:
            if have is not None:
                self._retired.append(have[0])
            ptr = self._alloc(nbytes)
            self._memset(ptr, nbytes)  # zero always: `zero` workspaces need it, others get determinism
            self._live[w.key] = (ptr, nbytes)
        return self._live[w.key][0]

    def live(self) -> dict[str, tuple[int, int]]:
        """{buffer key (Workspace.key): (pointer, bytes)} of the current buffers."""
        return dict(self._live)

    def close(self) -> None:
        for p in [p for p, _ in self._live.values()] + self._retired:
            self._free(p)
        self._live.clear()
        self._retired.clear()
