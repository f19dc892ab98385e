"""The runtime's refusal: `LaunchError`, one R-* diagnostic with a hint, and the R-* codes."""

from __future__ import annotations

from typing import Iterable

from pipelink.common.diagnostics import CODES, Diagnostic, Fact, Rejected

# The R-* codes: diagnostics.CODES is their one list (`pipelink explain` reads it).
RUNTIME_CODES: dict[str, str] = {k: v for k, v in CODES.items() if k.startswith("R-")}


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
