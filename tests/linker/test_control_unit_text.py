"""The control translation unit is generated text (control.py): what a package records (its -D
copts, its sources' paths) must stay within its own line of control.cu.

A package is data from elsewhere. Before, `--copt=-DTILE=1\\n<any line>` made that line a line
of control.cu (here a comment, so the control still built and no one saw it), and a source path
holding a quote ended its #include early.
"""

from __future__ import annotations

import dataclasses

import pytest

from pipelink.linker.compose import parse_kernel
from pipelink.linker.link import link


def _control_codes(toy, **replace):
    pkgs = [dataclasses.replace(toy.producer, **replace), toy.consumer, toy.sink]
    res = link(parse_kernel(str(toy.kernel), pkgs), control=True)
    assert res.cubin  # the linked outputs are good either way
    return [] if res.control_error is None else res.control_error.diagnostics


@pytest.mark.parametrize("define", ["-DPL_EXTRA=1\n// a line of control.cu that no compile of the package saw",
                                    "-DPL_EXTRA\r=1", "-DPL_EXTRA=\x1b[2J"])
def test_define_with_a_line_break_is_l_control(toy, define):
    diags = _control_codes(toy, copts=(*toy.producer.copts, define))
    assert [d.code for d in diags] == ["L-CONTROL"] and "line break" in diags[0].message and diags[0].hint


def test_source_path_that_ends_an_include_is_p_package(toy):
    sources = {(k if not k.endswith(".cu") else 'x"y.cu'): v for k, v in toy.producer.sources.items()}
    diags = _control_codes(toy, sources=sources)
    assert [d.code for d in diags] == ["P-PACKAGE"] and "#include" in diags[0].message


def test_one_line_define_still_builds(toy):
    assert _control_codes(toy, copts=(*toy.producer.copts, "-DPL_EXTRA=(1 + 2)")) == []
