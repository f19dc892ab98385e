"""The text of the files cuda_configure.bzl generates, from values found on the local machine.

Those values (toolkit and interpreter paths, how they were found, the nvcc version, the reasons
a detection failed) come from environment variables, MODULE.bazel tags and the file system, so
they may hold a quote, a backslash, a newline or a `$`. Every one is written into a BUILD file
as a one-line Starlark string literal (`starlark_string`; also in comments: a line break there
would end the comment and start BUILD code), and into a shell script single-quoted (`sh_quote`). What no quoting can
make work is refused by the caller with the variable's name (`control_chars`: a `#!` line or a
file name cannot hold a line break; `host_compiler_problem`: nvcc runs the host compiler
through a shell).
"""

load(":validate.bzl", "SHELL_BARE_CHARS")

# Bazel's Starlark has no chr(): the C0 control characters and DEL, as octal escapes.
_CONTROL_CHARS = ("\001\002\003\004\005\006\007\010\011\012\013\014\015\016\017\020" +
                  "\021\022\023\024\025\026\027\030\031\032\033\034\035\036\037\177")


_ESCAPES = {"\\": "\\\\", "\"": "\\\"", "\n": "\\n", "\r": "\\r", "\t": "\\t"}

def _octal(code):
    return "\\" + str(code // 64) + str((code // 8) % 8) + str(code % 8)

def starlark_string(s):
    """`s` as a double-quoted Starlark string literal on one line (a line break as \\n, other
    control characters as octal escapes). Spelled out rather than left to repr(), so that what the
    generated files hold does not rest on how a Bazel version's repr() writes control characters."""
    out = []
    for ch in s.elems():
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch in _CONTROL_CHARS:
            i = _CONTROL_CHARS.index(ch)
            out.append(_octal(127 if i == len(_CONTROL_CHARS) - 1 else i + 1))
        else:
            out.append(ch)
    return "\"" + "".join(out) + "\""

def control_chars(s):
    """The control characters of `s` (each as a Starlark literal, "\\n"), once each."""
    found = []
    for ch in s.elems():
        if ch in _CONTROL_CHARS and starlark_string(ch) not in found:
            found.append(starlark_string(ch))
    return found

def host_compiler_problem(path):
    """'' if nvcc can run `path` as its host compiler (-ccbin), else what is wrong with it."""
    # SHELL_BARE_CHARS: what the shell nvcc runs its host compiler through would expand or split
    bad = control_chars(path) + [starlark_string(ch) for ch in SHELL_BARE_CHARS if ch in path and ch not in _CONTROL_CHARS]
    if bad:
        return "it holds %s, which the shell nvcc runs the host compiler through would expand or split" % ", ".join(bad)
    return ""

def py_stub_shebang(python):
    """The first lines of the stub Bazel writes for each py_test (a Python script). A `#!` line
    cannot quote (Linux splits it at the first blank), so the stub starts as a /bin/sh script that
    execs `python` quoted on itself; Python reads that line and the next as a string. sh's `'` is
    written "'" because Python would read a backslash as an escape."""
    quoted = "'" + python.replace("'", "'\"'\"'") + "'"
    return "#!/bin/sh\n'''exec' " + quoted + " \"$0\" \"$@\"\n' '''"

def py_test_interpreter_problem(python):
    """'' if Bazel's py_test stub can run `python`, else why not and the fix (after " Fix: ")."""
    bad = [starlark_string(ch) for ch in ("'", "\\") if ch in python]
    if not bad:
        return ""
    return ("the interpreter %s holds %s, which Bazel writes into a Python string of every py_test's stub. " % (starlark_string(python), " and ".join(bad)) +
            "Fix: point pipelink_toolchains.python(interpreter = ...) or PIPELINK_PYTHON at a path without them (a symlink to it)")

def sh_quote(s):
    """`s` as one single-quoted sh word."""
    return "'" + s.replace("'", "'\\''") + "'"

def missing_tool_script(name, home):
    """A script standing in for a tool the toolkit at `home` lacks: it fails, saying how to fix it."""
    message = "pipelink: %s is not in the CUDA toolkit at %s. Fix: bash tools/setup.sh (installs the nvidia-cuda-%s wheel)" % (name, home, name)
    return "#!/bin/sh\necho %s >&2\nexit 1\n" % sh_quote(message)

def local_cuda_stub_build(toolchain_bzl, toolchain_type, reason):
    """@local_cuda when no toolkit was found: a toolchain that fails with `reason` when a rule uses it."""
    return """\
load({bzl}, "cuda_toolchain")
package(default_visibility = ["//visibility:public"])
cuda_toolchain(name = "toolkit", missing_reason = {reason})
toolchain(name = "cuda_toolchain", toolchain = ":toolkit", toolchain_type = {tt})
""".format(bzl = starlark_string(toolchain_bzl), reason = starlark_string(reason), tt = starlark_string(toolchain_type))

def local_cuda_build(v):
    """@local_cuda's BUILD for a found toolkit. v: a dict of home, how, include_note (fixed text),
    toolchain_bzl, toolchain_type, cuobjdump, nvdisasm, nvjitlink, cutlass_dir, host_cc, version,
    exec_constraints (list)."""
    return """\
# Generated by pipelink_rules/private/cuda_configure.bzl. Toolkit: {home} (found via {how}).
{include_note}load({bzl}, "cuda_toolchain")

package(default_visibility = ["//visibility:public"])

exports_files(glob(["bin/*", "lib/*"]))

filegroup(name = "nvcc", srcs = ["bin/nvcc"])

filegroup(
    name = "nvcc_files",
    srcs = glob(["bin/**", "nvvm/**", "include/**", "lib/**"], exclude = ["**/__pycache__/**", "lib/cmake/**"]),
)

filegroup(name = "headers", srcs = glob(["include/**"]))

filegroup(name = "cuobjdump", srcs = [{cuobjdump}])

filegroup(name = "nvdisasm", srcs = [{nvdisasm}])

filegroup(name = "nvjitlink", srcs = [{nvjitlink}])

filegroup(name = "cutlass_headers", srcs = glob(["cutlass/include/**"], exclude = ["**/.empty"]))

cuda_toolchain(
    name = "toolkit",
    nvcc = "bin/nvcc",
    nvcc_files = ":nvcc_files",
    cuobjdump = {cuobjdump},
    nvdisasm = {nvdisasm},
    nvjitlink = {nvjitlink},
    cutlass_headers = ":cutlass_headers",
    cutlass_include_dir = {cutlass_dir},
    host_compiler = {host_cc},
    version = {version},
    copts = [],
)

toolchain(
    name = "cuda_toolchain",
    exec_compatible_with = {exec_constraints},
    toolchain = ":toolkit",
    toolchain_type = {tt},
)
""".format(
        home = starlark_string(v["home"]),
        how = starlark_string(v["how"]),
        include_note = v["include_note"],
        bzl = starlark_string(v["toolchain_bzl"]),
        cuobjdump = starlark_string(v["cuobjdump"]),
        nvdisasm = starlark_string(v["nvdisasm"]),
        nvjitlink = starlark_string(v["nvjitlink"]),
        cutlass_dir = starlark_string(v["cutlass_dir"]),
        host_cc = starlark_string(v["host_cc"]),
        version = starlark_string(v["version"]),
        exec_constraints = "[" + ", ".join([starlark_string(c) for c in v["exec_constraints"]]) + "]",
        tt = starlark_string(v["toolchain_type"]),
    )

# What pack/link actions and sass tests run instead of the interpreter's own path: it reads that
# path from `interpreter_path` beside its real location, a file that is no action input, so a
# checkout's absolute .venv path stays out of the action keys and a fresh clone (CI's, another
# developer's) hits the cache. `interpreter.fingerprint` (an input) keys the actions on what the
# interpreter runs instead: its version and every distribution it has.
PYTHON_LAUNCHER = """#!/bin/sh
# Generated by pipelink_rules/private/cuda_configure.bzl: runs the linker's interpreter, whose
# path is in interpreter_path beside this file's real location (no action input).
here="$(dirname "$(readlink -f "$0")")"
python="$(cat "$here/interpreter_path")"
if [ ! -x "$python" ]; then
  echo "pipelink B-TOOLCHAIN: the linker's interpreter $python is gone (a removed or moved .venv). hint: bash tools/setup.sh in the pipelink checkout, or point pipelink_toolchains.python / PIPELINK_PYTHON at a python with z3-solver and cuda-bindings; then bazel build again (Bazel finds it anew)" >&2
  exit 1
fi
exec "$python" "$@"
"""

# Run by the interpreter itself (`python -s -c`): one line per fact that decides what the linker
# computes with it. Sorted, and free of paths, so two checkouts of one lock print the same text.
# The last line (not part of the fingerprint) names the site-packages whose listing Bazel
# watches, so installing or upgrading a package makes Bazel find the interpreter anew.
PYTHON_FINGERPRINT_SCRIPT = """
import importlib.metadata as m, platform, sys, sysconfig
print("python", sys.version.split()[0], platform.machine(), sys.implementation.cache_tag)
for d in sorted({(d.metadata["Name"] or "?").lower() + "==" + d.version for d in m.distributions()}):
    print(d)
print(sysconfig.get_paths()["purelib"])
"""

def pipelink_python_build(python, how, missing, python_toolchain_bzl, toolchain_type, rules_python_defs, py_test_refusal):
    """@pipelink_python's BUILD: the linker's interpreter `python` (found via `how`; `missing`:
    why none was found, '' if one was; `py_test_refusal`: why py_tests cannot run on it, '' if they can)."""
    return """\
# Generated by pipelink_rules/private/cuda_configure.bzl. Interpreter: {python} (found via {how}).
load({bzl}, "pipelink_py_test_runtime", "pipelink_python_toolchain")
load({defs}, "py_runtime", "py_runtime_pair")

package(default_visibility = ["//visibility:public"])

# The interpreter of pipelink's pack/link actions and sass tests, run through the launcher
# `python` (keyed by `interpreter.fingerprint`, not by its path): pipelink's own toolchain
# type, so it never becomes the Python of the consumer's py_binary/py_test targets.
pipelink_python_toolchain(
    name = "linker_python",
    launcher = ":python",
    fingerprint = ":interpreter.fingerprint",
    missing_reason = {missing},
)

toolchain(
    name = "linker_toolchain",
    toolchain = ":linker_python",
    toolchain_type = {tt},
)

# The same interpreter as a Python toolchain for pipelink's own py_test targets: registered
# by pipelink's MODULE.bazel with dev_dependency = True, i.e. only when pipelink is the root.
py_runtime(
    name = "venv_python",
    interpreter_path = {python},
    python_version = "PY3",
    stub_shebang = {shebang},
)

py_runtime_pair(
    name = "runtime_pair",
    py3_runtime = ":venv_python",
)

# The pair, or a B-TOOLCHAIN failure where a py_test could not run on this interpreter.
pipelink_py_test_runtime(
    name = "py_test_runtime",
    runtime = ":runtime_pair",
    refusal = {refusal},
)

toolchain(
    name = "python_toolchain",
    toolchain = ":py_test_runtime",
    toolchain_type = "@bazel_tools//tools/python:toolchain_type",
)
""".format(
        python = starlark_string(python),
        how = starlark_string(how),
        bzl = starlark_string(python_toolchain_bzl),
        defs = starlark_string(rules_python_defs),
        tt = starlark_string(toolchain_type),
        missing = starlark_string(missing),
        shebang = starlark_string(py_stub_shebang(python)),
        refusal = starlark_string(py_test_refusal),
    )
