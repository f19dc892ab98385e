"""pipelink.linker.sass.compare tells a difference in register numbers alone (the same
instruction stream, registers assigned otherwise) from any other: the verdict stays "different",
the report says which kind. CPU only: the disassembly is given, not read from cubins."""

from __future__ import annotations

import pytest

from pipelink.linker import sass

LINKED = ["S2R R14, SR_TID.X", "IMAD.MOV.U32 R12, RZ, RZ, 0x280", "IMAD R109, R109, R12, 0x1c0", "@!P1 BRA 0x1adb0"]
RENAMED = ["S2R R15, SR_TID.X", "IMAD.MOV.U32 R14, RZ, RZ, 0x280", "IMAD R109, R109, R14, 0x1c0", "@!P2 BRA 0x1adb0"]
OTHER = ["S2R R15, SR_TID.X", "IMAD.MOV.U32 R14, RZ, RZ, 0x281", "IMAD R109, R109, R14, 0x1c0", "@!P2 BRA 0x1adb0"]


@pytest.fixture
def disassembled(monkeypatch):
    funcs = {}
    monkeypatch.setattr(sass, "disassemble", lambda cubin, cuda_home=None, what="": {"k": funcs[cubin]})
    return funcs


@pytest.mark.parametrize("control, identical, registers_only", [
    (LINKED, True, False), (RENAMED, False, True), (OTHER, False, False), (LINKED[:-1], False, False)])
def test_compare_says_whether_only_register_numbers_differ(disassembled, control, identical, registers_only):
    disassembled[b"linked"], disassembled[b"control"] = LINKED, control
    f = sass.compare(b"linked", b"control", "k")["functions"]["k"]
    assert (f["identical"], f["registers_only"]) == (identical, registers_only)


def test_uniform_registers_and_predicates_are_renamed_too():
    assert sass._unnumbered(["ULDC.64 UR16, c[0x0][0x208]", "@UP0 BRA 0x10", "SEL R1, RZ, 0x4, P5"]) == \
        ["ULDC.64 UR, c[0x0][0x208]", "@UP BRA 0x10", "SEL R, RZ, 0x4, P"]
