"""Every way the command line can be wrong is E-USAGE with a hint, exit 2, in the format asked
for: argparse's own errors included (`pipelink --`, a missing command, an unknown option, a
bad choice, an abbreviated `--form=json`). A seeded fuzz over argparse's paths checks the class."""

from __future__ import annotations

import json
import random

import pytest

from pipelink.linker import cli
from pipelink.linker.usage import requested_format

VOCAB = ["--", "-", "-x", "--format", "--format=json", "--format=xml", "--form=json", "json", "--quiet",
         "--origin", "--origin=a=b", "pack", "link", "plan", "sass-diff", "explain", "L-BIND", "X-NOPE",
         "--contract", "--object", "--out", "--kernel", "--package", "--spills", "--spills=maybe", "--arch",
         "--bogus", "=", "", "é", "--out-dir", "--side-by-side", "--cuda-home", "map", "diff-map", "--html", "--placement"]


@pytest.mark.parametrize("argv", [["--"], ["--", "explain"], [], ["-x"], ["--format=xml", "explain"],
                                  ["link", "--spills=maybe"], ["explain", "a", "b"], ["--form=json", "bogus"]])
def test_usage_errors_are_coded(capsys, argv):
    rc = cli.main(argv)
    cap = capsys.readouterr()
    text = cap.out + cap.err
    assert rc == 2 and "E-USAGE" in text and ("hint:" in text or '"hint": "' in text), text
    if requested_format(argv) == "json":
        d = json.loads(cap.out)["diagnostics"][0]
        assert d["code"] == "E-USAGE" and d["hint"]


def test_requested_format():
    assert requested_format(["--format=json"]) == requested_format(["--form", "json"]) == "json"
    assert requested_format(["--format=json", "--format=human"]) == "human"
    assert requested_format(["--", "--format=json"]) == requested_format(["--f=json"]) == "human"


def test_fuzzed_command_lines_never_exit_without_a_code(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no token names a real file: every command fails early
    rng = random.Random(44)
    for _ in range(400):
        argv = [rng.choice(VOCAB) for _ in range(rng.randint(0, 6))]
        try:
            rc = cli.main(argv)
        except SystemExit as e:  # only --help may leave through argparse
            rc = e.code
        cap = capsys.readouterr()
        if rc == 0:
            continue
        text = cap.out + cap.err
        assert rc in (1, 2), (argv, rc, text)
        assert "Traceback" not in text and "E-INTERNAL" not in text, (argv, text)
        if requested_format(argv) == "json":
            diags = json.loads(cap.out)["diagnostics"]
        else:
            assert text.startswith("error "), (argv, text)
            diags = [{"code": text.split()[1].rstrip(":"), "hint": "hint:" in text}]
        assert all(d["code"][:2] in ("E-", "C-", "P-") and d["hint"] for d in diags), (argv, text)


def test_a_trailing_format_without_value_keeps_the_json_asked_for_before(capsys):
    """`--format=json ... --format` (no value) is a usage error reported in the JSON asked for."""
    rc = cli.main(["--format=json", "explain", "L-BIND", "--format"])
    out = capsys.readouterr().out
    assert rc == 2 and '"E-USAGE"' in out and '"hint"' in out


@pytest.mark.parametrize("bad", ["--format=xml", "--format=JSON", "--form=yaml"])
def test_an_invalid_later_format_keeps_the_json_asked_for_before(capsys, bad):
    """`--format=json ... --format=xml`: the bad value is the usage error, reported in the JSON
    asked for (it used to switch the error to human text on a JSON consumer's stdout)."""
    rc = cli.main(["--format=json", "plan", "--kernel", "k.kernel.toml", bad])
    d = json.loads(capsys.readouterr().out)["diagnostics"][0]
    assert rc == 2 and d["code"] == "E-USAGE" and d["hint"]
    assert requested_format(["--format=json", bad]) == "json"


@pytest.mark.parametrize("code", ["", " ", "l-bind", "L-BIND ", "E-INTERNAL\n"])
def test_explain_of_an_empty_or_unknown_code_is_e_usage(capsys, code):
    """`explain ""` used to list every code and exit 0, as if no code had been given."""
    rc = cli.main(["--format=json", "explain", code])
    d = json.loads(capsys.readouterr().out)["diagnostics"][0]
    assert rc == 2 and d["code"] == "E-USAGE" and d["hint"]
