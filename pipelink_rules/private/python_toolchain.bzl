"""The interpreter of pipelink's linker, as pipelink's own toolchain type.

Generated in @pipelink_python (cuda_configure.bzl) from the root module's
`pipelink_toolchains.python(...)` tag or detection. A separate toolchain type (not
@bazel_tools//tools/python:toolchain_type) keeps it out of the consumer's py_binary targets.
"""

load(":errors.bzl", "pl_fail")
load(":toolchain.bzl", "toolchain_fail")

PYTHON_TOOLCHAIN_TYPE = Label("//pipelink_rules:python_toolchain_type")

PipelinkPythonInfo = provider(
    doc = "The interpreter pipelink's pack/link actions and sass tests run the linker with.",
    fields = {
        "interpreter": "File: the launcher that runs a python (>= 3.11) with z3-solver and cuda-bindings.",
        "files": "depset: the launcher and the interpreter's fingerprint (what the actions are keyed on).",
    },
)

def _pipelink_python_toolchain_impl(ctx):
    if ctx.attr.missing_reason:
        toolchain_fail(ctx, ctx.attr.missing_reason,
                       "pipelink_toolchains.python(interpreter = <python with z3-solver and cuda-bindings>) in MODULE.bazel")
    info = PipelinkPythonInfo(
        interpreter = ctx.file.launcher,
        files = depset([ctx.file.launcher, ctx.file.fingerprint]),
    )
    return [platform_common.ToolchainInfo(python = info)]

pipelink_python_toolchain = rule(
    implementation = _pipelink_python_toolchain_impl,
    attrs = {
        "launcher": attr.label(allow_single_file = True, mandatory = True,
                               doc = "A script that execs the interpreter, whose path it reads from a file that is no action input."),
        "fingerprint": attr.label(allow_single_file = True, mandatory = True,
                                  doc = "The interpreter's version and distributions: keys the actions instead of its path."),
        "missing_reason": attr.string(doc = "If set, no interpreter was found: fail with this message when used."),
    },
    doc = "The linker's interpreter (a host path behind a launcher). Instances are generated in @pipelink_python.",
)

def _pipelink_py_test_runtime_impl(ctx):
    if ctx.attr.refusal:
        toolchain_fail(ctx, ctx.attr.refusal, "pipelink_toolchains.python(interpreter = ...) in MODULE.bazel")
    return [ctx.attr.runtime[platform_common.ToolchainInfo]]

pipelink_py_test_runtime = rule(
    implementation = _pipelink_py_test_runtime_impl,
    attrs = {
        "runtime": attr.label(doc = "The py_runtime_pair of the linker's interpreter."),
        "refusal": attr.string(doc = "If set, py_tests cannot run on the interpreter: fail with this message when used."),
    },
    doc = "The Python toolchain of pipelink's own py_tests (root module only), or a coded failure.",
)

def linker_invocation(ctx, runfiles = False):
    """(argv prefix, input files, PYTHONPATH, pipelink/__init__.py) to run `python -m pipelink`
    in an action, or with `runfiles` from a test's runfiles directory of the main repository.

    The calling rule declares `toolchains = [PYTHON_TOOLCHAIN_TYPE]` and has a `_linker`
    attribute (//tools:pipelink_linker_files: the linker's sources and pipelink.h).
    """
    python = ctx.toolchains[PYTHON_TOOLCHAIN_TYPE].python
    sources = ctx.attr._linker[DefaultInfo].files
    init = [f for f in sources.to_list() if f.short_path.endswith("pipelink/__init__.py")]
    if len(init) != 1:
        pl_fail(ctx, "B-TOOLCHAIN", "//tools:pipelink_linker_files holds %d pipelink/__init__.py files, not one" % len(init),
                "keep the linker's sources in one tools/pipelink package")
    tools_dir = init[0].dirname.rpartition("/")[0]  # <...>/tools/pipelink -> <...>/tools
    launcher = python.interpreter.short_path if runfiles else python.interpreter.path
    files = depset(transitive = [sources, python.files])
    return [launcher, "-s", "-m", "pipelink"], files, tools_dir, init[0]
