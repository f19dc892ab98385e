"""The runtime's refusal: `LaunchError`, one R-* diagnostic with a hint, and the R-* codes."""

from __future__ import annotations

from typing import Iterable

from pipelink.diagnostics import Diagnostic, Fact, Rejected

RUNTIME_CODES: dict[str, str] = {
    "R-PARAM": "a launch parameter is missing, unknown, of the wrong kind or range, or ignored by the variant",
    "R-SHAPE": "a shape does not fit the kernel (grid not divisible, out of range, wrong tensor shape)",
    "R-DTYPE": "a tensor has the wrong element type",
    "R-LAYOUT": "a tensor is not laid out as the kernel needs (contiguity, alignment), or an output overlaps an input",
    "R-DEVICE": "the GPU, its architecture or a tensor's device does not fit the kernel",
    "R-MANIFEST": "the manifest is missing, damaged, or disagrees with the cubin",
    "R-CUDA": "a CUDA driver call failed",
    "R-HOST": "a host provider refused the lent values, failed, or returned a wrong parameter region",
    "R-WORKSPACE": "a caller-lent workspace buffer names no workspace of the kernel, is too small or misaligned",
}


class LaunchError(Rejected):
    """A launch refused before (or failed at) the CUDA call: one R-* diagnostic."""

    def __init__(self, code: str, message: str, *, hint: str = "", facts: Iterable[Fact] = ()):
        super().__init__(Diagnostic(code, message, "", tuple(facts), hint))

    @property
    def code(self) -> str:
        return self.diagnostics[0].code

    @property
    def hint(self) -> str:
        return self.diagnostics[0].hint

    def __str__(self) -> str:
        return self.diagnostics[0].render()
