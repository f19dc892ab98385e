"""The rules' analysis-time diagnostics: one stable B-* code and a hint for every bad input.

Every failure of a pipelink rule, macro, build setting, toolchain or module extension goes
through `pl_fail`, which renders one line in the linker's style (tools/pipelink/common/diagnostics.py):

    pipelink B-ARCH: //pkg:t: attribute arch: unsupported architecture 'sm_91'; supported:
    sm_90a, sm_100a, sm_120a, sm_90, sm_80. hint: set arch = "sm_90a"

(Bazel prefixes it with "Error in fail:"). Four are also raised while actions run, in the same
format: B-COMPILE (nvcc_wrapper.sh, under nvcc's own errors), B-SUBST (substitute_contract.py,
a key the contract lacks), B-FACT (substitute_contract.py, a `facts` entry for a fact the
contract does not own) and B-FILE-TYPE (substitute_contract.py, a contract that is a directory
or not UTF-8). The table below is the only list of B-* codes;
docs/CONTRACTS.md, "Bazel rule codes", documents each with an example, and
tests/rules/ has one failure test per code.
"""

B_CODES = {
    "B-ARCH": "an architecture that pipelink does not support (an `arch` attribute or --//pipelink_rules:arch)",
    "B-ARCH-MISMATCH": "a component's architecture differs from its kernel's (a pinned `arch`, or a provider built for another)",
    "B-FILE-TYPE": "a file attribute holds the wrong kind of file, or several files where one goes, or a file the build cannot pass on (a source path with shell characters or not ASCII; a contract that is a directory or not UTF-8)",
    "B-SRCS": "a cuda_component has no .cu source, or two of its .cu would compile to one object path",
    "B-COMPONENTS": "a fused_kernel lists no components",
    "B-KERNEL-FACT": "a fused_kernel's `facts` is not a dict of C-identifier names to ints (u32), bools, or (\"u64\"|\"i32\", int) pairs within their type",
    "B-DUP-PACKAGE": "two components of one fused_kernel provide the same package name",
    "B-NAME": "a component name (the `component` attribute or the target name) is not a C identifier, or a target's name holds a character nvcc's shell expands or is not ASCII",
    "B-DEFINE": "a define is malformed (empty, not NAME or NAME=VALUE, a comma, a reserved PL_/pl_ name, a character nvcc's shell expands) or given twice with different values",
    "B-COPT": "a copt sets what the rule controls (arch, output, compile mode, host compiler, temporaries; also through -Xcompiler), names a path outside the workspace or a response file, holds shell metacharacters, or lacks its value",
    "B-INCLUDE": "an `includes` entry is empty, absolute, climbs out of the package, or holds a comma or a character nvcc's shell expands",
    "B-SUBST": "a contract_substitutions key is empty or occurs nowhere in the contract, or its value has another number of line breaks than the key",
    "B-FACT": "a cuda_component `facts` entry is not fact -> MACRO=VALUE with a u32 value, repeats a macro of `defines`, or (execution time) names a fact the contract does not own",
    "B-ARGS": "a fused_kernel_sass_test's args_extra is not a `pipelink sass-diff` option it may pass",
    "B-TOOLCHAIN": "the CUDA toolkit, host compiler, CUTLASS headers or the linker's Python are missing or misconfigured (or, for pipelink's own py_tests, the interpreter's path holds a ' or \\)",
    "B-MODULE": "a pipelink_toolchains module-extension tag (or its environment variable) is repeated or names a bad path, or a path the generated toolchain cannot carry (a host compiler with shell characters, an interpreter with a control character)",
    "B-VARIANT": "a kernel macro (kernels/*.bzl) asks for a variant its owner does not build (a tile geometry, a consumer)",
    "B-COMPILE": "nvcc failed compiling a component's source (execution time, under nvcc's own errors: nvcc_wrapper.sh)",
    "B-MUTATION": "a symbol_link_mutations row gives both or neither of component and target, repeats another row's name or has a name that is not path-safe, or its lists disagree in length",
}

def display_label(label):
    """//pkg:name for the main repository, @repo//pkg:name otherwise."""
    s = str(label)
    return s[2:] if s.startswith("@@//") else s

def _where(ctx_or_label):
    if ctx_or_label == None:
        return ""
    if type(ctx_or_label) == "string":
        return ctx_or_label
    if type(ctx_or_label) == "Label":
        return display_label(ctx_or_label)
    return display_label(ctx_or_label.label)  # a rule context

def pl_message(ctx_or_label, code, message, hint):
    """The rendered diagnostic (what pl_fail fails with)."""
    if code not in B_CODES:
        fail("pipelink B-INTERNAL: unknown diagnostic code %s (add it to pipelink_rules/private/errors.bzl)" % code)
    where = _where(ctx_or_label)
    return "pipelink %s: %s%s. hint: %s" % (code, where + ": " if where else "", message.rstrip("."), hint)

def pl_fail(ctx_or_label, code, message, hint):
    """Fails analysis (or loading, or repository fetching) with a coded diagnostic.

    Args:
      ctx_or_label: a rule context, a Label, a string naming the culprit, or None.
      code: a key of B_CODES.
      message: what is wrong, naming the attribute and the bad value.
      hint: what to write instead.
    """
    # Bazel prints the Starlark call stack above "Error in fail: <this line>". Bazel >= 9.0.1
    # takes fail(..., stack_trace = False) to drop it; 7.x rejects the parameter, so it is
    # added here (the only fail() of the rules) when the repository moves to Bazel 9.
    fail(pl_message(ctx_or_label, code, message, hint))
