"""fused_kernel: link packed components into one kernel; fused_kernel_sass_test.

    fused_kernel(
        name = "gemm_swiglu",
        kernel = "gemm_swiglu.kernel.toml",   # instances name packages by component name
        components = [":loader", ":mainloop", ":swiglu"],
        arch = "sm_90a",
    )

Outputs (default): <name>.cubin, <name>.manifest.json, <name>.report.json, <name>.map.txt,
from one `PipelinkLink` action. Output group `control`: <name>.control.cubin, from a
separate `PipelinkControlLink` action that also builds the kernel as one translation unit
(only run when that group, or a fused_kernel_sass_test, asks for it). Output group
`placement`: <name>.placement.json (the link action writes it; `pipelink diff-map` compares two).
Output group `map_html`: <name>.map.html, the placement drawn by `pipelink map` in a small
`PipelinkMap` action (`tools/bazel build //examples/toy:toy --output_groups=+map_html`).

The composition is the `.kernel.toml` file (docs/CONTRACTS.md, "Kernel composition"): it
is the same file `python -m pipelink link --kernel` takes, so a kernel links the same way
inside and outside Bazel. The rule's `arch` is passed as `--arch` and overrides the file's
`kernel.arch`; the components are transitioned to that architecture.

`facts = {"hidden": 4096}` adds facts the kernel owns (docs/CONTRACTS.md, "Kernel-owned facts")
to the kernel file, so one set of component packages serves many models, one fused_kernel each:
an int is a u32, True/False a bool, ("u64", v) or ("i32", v) the other types. The rule writes
the kernel file plus those `[fact.X] own = V` tables (`_pl_facts/<name>/<kernel file>`) and links
that; a value of another kind is B-KERNEL-FACT.
"""

load(":arch.bzl", "SUPPORTED_ARCHS", "arch_transition", "check_arch")
load(":cuda_component.bzl", "cuda_toolchain", "display_label", "pipelink_action_env", "run_pipelink")
load(":errors.bzl", "pl_fail")
load(":validate.bzl", "check_files", "check_sass_args", "check_target_name")
load(":python_toolchain.bzl", "PYTHON_TOOLCHAIN_TYPE", "linker_invocation")
load(":toolchain.bzl", "CUDA_TOOLCHAIN_TYPE")
load(":linker_cli.bzl", "ORIGIN_FLAG")
load(":providers.bzl", "CudaComponentInfo", "FusedKernelInfo")

def _link_args(ctx, toolchain, kernel_file, comps, outs, control = None):
    args = ctx.actions.args()
    args.add("link")
    args.add("--kernel", kernel_file)
    args.add_all([c.package for c in comps], before_each = "--package")
    args.add("--cubin", outs.cubin)
    args.add("--manifest", outs.manifest)
    args.add("--report", outs.report)
    args.add("--map", outs.map)
    args.add("--placement", outs.placement)
    if control:
        args.add("--control-cubin", control)
    args.add("--arch", ctx.attr.arch)
    args.add("--cuda-home", toolchain.cuda_home)
    if ctx.attr.spills != "error":
        args.add("--spills", ctx.attr.spills)
    if ORIGIN_FLAG:
        args.add("--origin", "%s=%s" % (kernel_file.path, display_label(ctx.label)))
        for c in comps:
            args.add("--origin", "%s=%s" % (c.packed_contract.path, display_label(c.label)))
    return args

def _declare_outputs(ctx, prefix):
    return struct(
        cubin = ctx.actions.declare_file(prefix + ".cubin"),
        manifest = ctx.actions.declare_file(prefix + ".manifest.json"),
        report = ctx.actions.declare_file(prefix + ".report.json"),
        map = ctx.actions.declare_file(prefix + ".map.txt"),
        placement = ctx.actions.declare_file(prefix + ".placement.json"),
    )

_FACT_BOUNDS = {"u32": (0, 4294967295), "u64": (0, 18446744073709551615), "i32": (-2147483648, 2147483647)}
_IDENT_START = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
_IDENT_REST = _IDENT_START + "0123456789"
_FACTS_HINT = 'write facts = {"hidden": 4096} (a u32), True/False (a bool), or ("u64", v) / ("i32", v)'

def _fact_value(ctx, name, v):
    """(type, TOML value) of one facts entry, or B-KERNEL-FACT."""
    what = "attribute facts: %s = %r" % (name, v)
    if type(v) == "bool":
        return "bool", "true" if v else "false"
    if type(v) == "list" and len(v) == 2 and v[0] == "bool" and type(v[1]) == "bool":
        return "bool", "true" if v[1] else "false"
    ftype, value = "u32", v
    if type(v) == "list" and len(v) == 2 and type(v[0]) == "string":
        ftype, value = v[0], v[1]
        if ftype not in _FACT_BOUNDS:
            pl_fail(ctx, "B-KERNEL-FACT", "%s: unknown fact type '%s'" % (what, ftype), _FACTS_HINT)
    if type(value) != "int":
        pl_fail(ctx, "B-KERNEL-FACT", "%s is a %s, not an integer or a bool" % (what, type(value)), _FACTS_HINT)
    lo, hi = _FACT_BOUNDS[ftype]
    if value < lo or value > hi:
        pl_fail(ctx, "B-KERNEL-FACT", "%s is outside %s's %d..%d" % (what, ftype, lo, hi), _FACTS_HINT)
    return ftype, str(value)

def _fact_tables(ctx):
    """The kernel file's `[fact.X]` tables for the `facts` attribute ("" when it is empty)."""
    if not ctx.attr.facts_json:
        return ""
    facts = json.decode(ctx.attr.facts_json)
    if type(facts) != "dict":
        pl_fail(ctx, "B-KERNEL-FACT", "attribute facts is a %s, not a dict of fact names to values" % type(facts), _FACTS_HINT)
    lines = ["", "# from fused_kernel(facts = ...) of " + display_label(ctx.label)]
    for name in sorted(facts):
        if not name or name[0] not in _IDENT_START or [c for c in name.elems() if c not in _IDENT_REST]:
            pl_fail(ctx, "B-KERNEL-FACT", "attribute facts: '%s' is not a C identifier" % name, "name the fact as the contracts do")
        ftype, value = _fact_value(ctx, name, facts[name])
        lines += ["", "[fact.%s]" % name] + (['type = "%s"' % ftype] if ftype != "u32" else []) + ["own = " + value]
    return "\n".join(lines) + "\n"

def _kernel_with_facts(ctx, kernel_file):
    """The kernel file, with the `facts` attribute's tables appended when there are any."""
    tables = _fact_tables(ctx)
    if not tables:
        return kernel_file
    part = ctx.actions.declare_file("_pl_facts/%s/facts.toml" % ctx.label.name)
    ctx.actions.write(part, tables)
    out = ctx.actions.declare_file("_pl_facts/%s/%s" % (ctx.label.name, kernel_file.basename))
    ctx.actions.run_shell(
        inputs = [kernel_file, part],
        outputs = [out],
        command = 'cat "$1" "$2" > "$3"',
        arguments = [kernel_file.path, part.path, out.path],
        mnemonic = "PipelinkKernelFacts",
        progress_message = "Adding the facts of %{label} to its kernel file",
    )
    return out

def _fused_kernel_impl(ctx):
    check_arch(ctx, ctx.attr.arch)
    check_target_name(ctx)
    toolchain = cuda_toolchain(ctx)
    kernel_file = check_files(ctx, "kernel", ctx.files.kernel, [".kernel.toml"],
                              "name the <kernel>.kernel.toml composition file (docs/CONTRACTS.md, \"Kernel composition\")",
                              single = True)
    kernel_file = _kernel_with_facts(ctx, kernel_file)
    if not ctx.attr.components:
        pl_fail(ctx, "B-COMPONENTS", "attribute components is empty",
                "list the cuda_component targets whose packages the kernel file's [[instance]] entries name")
    comps = [c[CudaComponentInfo] for c in ctx.attr.components]
    seen = {}
    for c in comps:
        if c.component in seen:
            pl_fail(ctx, "B-DUP-PACKAGE", "components %s and %s both provide package '%s'" %
                                          (display_label(seen[c.component]), display_label(c.label), c.component),
                    "list each package once; a variant needs its own fused_kernel")
        seen[c.component] = c.label
        if c.arch != ctx.attr.arch:
            pl_fail(ctx, "B-ARCH-MISMATCH", "component %s was built for '%s', the kernel is for '%s'" %
                                            (display_label(c.label), c.arch, ctx.attr.arch),
                    "build the component in the kernel's configuration (a cuda_component follows the fused_kernel's arch)")

    packages = depset([c.package for c in comps])
    tool_inputs = toolchain.nvcc_files
    env = pipelink_action_env(toolchain)

    origins = [(kernel_file, "the kernel file", ctx.label)] + [(c.packed_contract, "the contract", c.label) for c in comps]

    outs = _declare_outputs(ctx, ctx.label.name)
    run_pipelink(
        ctx,
        arguments = [_link_args(ctx, toolchain, kernel_file, comps, outs)],
        inputs = depset([kernel_file], transitive = [packages, tool_inputs]),
        outputs = [outs.cubin, outs.manifest, outs.report, outs.map, outs.placement],
        mnemonic = "PipelinkLink",
        progress_message = "Linking fused kernel %{label} for " + ctx.attr.arch,
        env = env,
        origins = origins,
    )

    # The control build: the same link plus the one-translation-unit build, in its own
    # action so a normal build never pays for it. Its copies of the linked outputs are
    # scratch (the CLI writes them); only the control cubin is exposed.
    control = ctx.actions.declare_file(ctx.label.name + ".control.cubin")
    scratch = _declare_outputs(ctx, "_pl_control/%s/%s" % (ctx.label.name, ctx.label.name))
    run_pipelink(
        ctx,
        arguments = [_link_args(ctx, toolchain, kernel_file, comps, scratch, control = control)],
        inputs = depset(
            [kernel_file],
            transitive = [packages, tool_inputs] + [c.sources for c in comps] + [c.headers for c in comps],
        ),
        outputs = [control, scratch.cubin, scratch.manifest, scratch.report, scratch.map, scratch.placement],
        mnemonic = "PipelinkControlLink",
        progress_message = "Building control kernel %{label} (one translation unit) for " + ctx.attr.arch,
        env = env,
        origins = origins,
    )

    # The placement drawn as one self-contained HTML page (only built when its group is asked for).
    map_html = ctx.actions.declare_file(ctx.label.name + ".map.html")
    map_args = ctx.actions.args()
    map_args.add("map")
    map_args.add(outs.placement)
    map_args.add("--html", map_html)
    run_pipelink(
        ctx,
        arguments = [map_args],
        inputs = depset([outs.placement]),
        outputs = [map_html],
        mnemonic = "PipelinkMap",
        progress_message = "Drawing the placement of %{label}",
        env = env,
    )

    return [
        DefaultInfo(files = depset([outs.cubin, outs.manifest, outs.report, outs.map])),
        OutputGroupInfo(
            control = depset([control]),
            placement = depset([outs.placement]),
            map_html = depset([map_html]),
        ),
        FusedKernelInfo(
            name = ctx.label.name,
            cubin = outs.cubin,
            manifest = outs.manifest,
            report = outs.report,
            map = outs.map,
            control_cubin = control,
            kernel = kernel_file,
            packages = packages,
            arch = ctx.attr.arch,
        ),
    ]

_fused_kernel = rule(
    implementation = _fused_kernel_impl,
    doc = "Links cuda_component packages into one fused kernel with `pipelink link` " +
          "(provider FusedKernelInfo; output group `control` holds the control cubin).",
    attrs = {
        "kernel": attr.label(
            allow_files = True,  # exactly one .kernel.toml, checked in the implementation (B-FILE-TYPE)
            mandatory = True,
            doc = "The <kernel>.kernel.toml composition file; its [[instance]] entries name " +
                  "packages by component name.",
        ),
        "components": attr.label_list(
            providers = [CudaComponentInfo],
            cfg = arch_transition,
            doc = "The cuda_component targets whose packages the kernel instantiates; built " +
                  "for this kernel's arch.",
        ),
        "arch": attr.string(
            default = "sm_90a",
            doc = "Target architecture, one of %s (passed as `link --arch`)." % SUPPORTED_ARCHS,
        ),
        "facts_json": attr.string(
            doc = "The fused_kernel macro's `facts`, JSON-encoded (a rule attribute cannot hold ints and " +
                  "bools in one dict); checked here, at analysis, for coded B-KERNEL-FACT errors.",
        ),
        "spills": attr.string(
            default = "error",
            values = ["error", "warning"],
            doc = "Local memory in the linked kernel (`link --spills`): an L-REGS error, or a " +
                  "warning for diagnostic builds whose instrumentation costs registers.",
        ),
        "_linker": attr.label(
            default = Label("//tools:pipelink_linker_files"),
            cfg = "exec",
        ),
        "_allowlist_function_transition": attr.label(
            default = "@bazel_tools//tools/allowlists/function_transition_allowlist",
        ),
    },
    toolchains = [CUDA_TOOLCHAIN_TYPE, PYTHON_TOOLCHAIN_TYPE],
    provides = [FusedKernelInfo],
)

def fused_kernel(name, facts = {}, **kwargs):
    """Links cuda_component packages into one fused kernel with `pipelink link`.

    Args:
      name: target name.
      facts: facts the kernel owns, {name: value}: an int is a u32, True/False a bool,
        ("u64", v) / ("i32", v) the other types (docs/CONTRACTS.md, "Kernel-owned facts").
      **kwargs: the rule's attributes (kernel, components, arch, spills) and common ones.
    """
    _fused_kernel(name = name, facts_json = json.encode(facts) if facts else "", **kwargs)

# ---- SASS equivalence test --------------------------------------------------------------

def _runfiles_path(ctx, f):
    # Path relative to the test's runfiles directory of the main repository.
    return f.short_path

def _sh(s):
    """`s` as one single-quoted sh word: target names may hold $, `, " and ' (`k$(cmd)`), which a
    double-quoted word would expand when the test runs."""
    return "'" + s.replace("'", "'\\''") + "'"

def _sass_test_impl(ctx):
    info = ctx.attr.kernel[FusedKernelInfo]
    check_sass_args(ctx, ctx.attr.args_extra)
    toolchain = cuda_toolchain(ctx)
    argv, linker_files, _, init = linker_invocation(ctx, runfiles = True)
    tools_dir = init.short_path.rpartition("/")[0].rpartition("/")[0]  # runfiles path of tools/
    cuda_home = toolchain.nvcc.short_path.rsplit("/", 2)[0]  # <home>/bin/nvcc -> <home>
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(
        output = script,
        is_executable = True,
        content = """#!/bin/sh
# generated by fused_kernel_sass_test: the linked kernel's normalized SASS must equal the
# control build's (all components compiled as one translation unit).
set -e
cd "${{TEST_SRCDIR:-$0.runfiles}}"/{ws}
export PIPELINK_CUDA_HOME="$PWD"/{home}
export PIPELINK_HOST_CXX={cxx}
export PYTHONPATH="$PWD"/{tools_dir} PYTHONSAFEPATH=1 PYTHONDONTWRITEBYTECODE=1
# The cubins' paths come through the environment (RunEnvironmentInfo): written into this file,
# a non-ASCII target name arrived double-encoded (Bazel 7 reads BUILD files as Latin-1).
exec {argv} sass-diff "$PIPELINK_SASS_LINKED" "$PIPELINK_SASS_CONTROL" {extra}
""".format(
            ws = _sh(ctx.workspace_name),
            home = _sh(cuda_home),
            cxx = _sh(toolchain.host_compiler),
            tools_dir = _sh(tools_dir),
            argv = " ".join([_sh(a) for a in argv]),
            extra = " ".join([_sh(a) for a in ctx.attr.args_extra]),
        ),
    )
    runfiles = ctx.runfiles(
        files = [info.cubin, info.control_cubin, toolchain.nvcc, toolchain.cuobjdump, toolchain.nvdisasm],
        transitive_files = linker_files,
    )
    return [
        DefaultInfo(executable = script, runfiles = runfiles),
        RunEnvironmentInfo(environment = {
            "PIPELINK_SASS_LINKED": _runfiles_path(ctx, info.cubin),
            "PIPELINK_SASS_CONTROL": _runfiles_path(ctx, info.control_cubin),
        }),
    ]

_fused_kernel_sass_test = rule(
    implementation = _sass_test_impl,
    test = True,
    attrs = {
        "kernel": attr.label(providers = [FusedKernelInfo], mandatory = True),
        "args_extra": attr.string_list(doc = "Extra arguments for `pipelink sass-diff`."),
        "_linker": attr.label(
            default = Label("//tools:pipelink_linker_files"),
            cfg = "target",
        ),
    },
    toolchains = [CUDA_TOOLCHAIN_TYPE, PYTHON_TOOLCHAIN_TYPE],
)

def fused_kernel_sass_test(name, kernel, **kwargs):
    """A test that passes iff `pipelink sass-diff` finds the linked kernel's normalized SASS
    identical to its control build (<kernel>.control.cubin).

    Args:
      name: test target name.
      kernel: the fused_kernel target.
      **kwargs: common test attributes (size, tags, args_extra, ...).
    """
    kwargs.setdefault("size", "small")
    _fused_kernel_sass_test(name = name, kernel = kernel, **kwargs)
