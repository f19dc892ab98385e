"""cuda_component: compile a component's CUDA sources to LTO-IR and pack them.

    cuda_component(
        name = "loader",
        srcs = ["loader.cu"],
        hdrs = ["stage_layout.h"],
        contract = "loader.contract.toml",
        deps = [":common_headers"],        # cc_library headers (CcInfo)
        defines = ["BLOCK_M=128"],
        facts = {"block_n": "LOADER_BLOCK_N=64"},  # -DLOADER_BLOCK_N=64 and the contract's own = 64
        copts = [],
        cutlass = False,                   # add the toolchain's CUTLASS/CuTe headers
    )

Actions (all with declared inputs only, no host environment):
  * one `PipelinkCudaCompile` per .cu (H1's cuda_compile_action): nvcc -dc to LTO-IR for the
    configured architecture;
  * one `PipelinkPack` running `pipelink pack`, which measures the objects and checks them
    against the contract, producing `<name>.plpkg`.

The architecture comes from the configuration (`//pipelink_rules:arch`, default sm_90a);
`fused_kernel(arch = ...)` transitions its components to its own architecture.
"""

load(":arch.bzl", "DEFAULT_ARCH", "SUPPORTED_ARCHS", "check_arch", "suggest_arch")
load(":cuda_compile.bzl", "cuda_compile_action")
load(":errors.bzl", _display_label = "display_label", "pl_fail")
load(":linker_cli.bzl", "ORIGIN_FLAG", "PACK_ARCH_FLAG")
load(":providers.bzl", "CudaComponentInfo", "PipelinkArchInfo")
load(":python_toolchain.bzl", "PYTHON_TOOLCHAIN_TYPE", "linker_invocation")
load(":toolchain.bzl", "CUDA_TOOLCHAIN_TYPE", "find_cuda_toolchain")
load(
    ":validate.bzl",
    "check_component_name",
    "check_copts",
    "check_defines",
    "check_facts",
    "check_files",
    "check_includes",
    "check_shell_paths",
    "check_substitutions",
)

SRC_SUFFIXES = [".cu", ".cuh", ".h", ".hpp"]
HDR_SUFFIXES = [".h", ".hpp", ".cuh", ".inc"]

# //pkg:name for the main repository, @repo//pkg:name otherwise (errors.bzl).
display_label = _display_label

def cuda_toolchain(ctx):
    """The CudaToolchainInfo of the resolved CUDA toolchain."""
    return find_cuda_toolchain(ctx)

def pipelink_action_env(toolchain):
    """The complete environment of pack/link actions: fixed, with no host variables."""
    return {
        "PATH": "/usr/bin:/bin",
        "LC_ALL": "C",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONSAFEPATH": "1",
        "PIPELINK_HOST_CXX": toolchain.host_compiler,
    }

def run_pipelink(ctx, arguments, inputs, outputs, mnemonic, progress_message, env, origins = []):
    """Runs the linker CLI (`python -m pipelink`, the interpreter of pipelink's python
    toolchain, the linker's sources as inputs) as an action. Its success summary (stdout) is
    dropped so builds stay quiet (the map is an output file); diagnostics on stderr surface as
    the build error.

    origins: (File, description, Label) triples; when the linker rejects its inputs, one line
    each after its diagnostics says which Bazel target a contract or kernel file belongs to
    (until the CLI takes --origin: linker_cli.bzl).
    """
    notes = ["  from Bazel: %s is %s of %s" % (f.path, what, display_label(label)) for f, what, label in origins]
    argv, linker_files, pythonpath, _ = linker_invocation(ctx)
    env = dict(env)
    env["PYTHONPATH"] = pythonpath
    command = '"$@" > /dev/null'
    if notes and not ORIGIN_FLAG:
        env["PIPELINK_BAZEL_ORIGINS"] = "\n".join(notes)
        command = '"$@" > /dev/null && exit 0; rc=$?; printf "%s\n" "$PIPELINK_BAZEL_ORIGINS" >&2; exit $rc'
    ctx.actions.run_shell(
        command = command,
        arguments = argv + arguments,
        inputs = depset(transitive = [inputs, linker_files]),
        outputs = outputs,
        mnemonic = mnemonic,
        progress_message = progress_message,
        env = env,
        use_default_shell_env = False,
    )

def object_stem(src, label):
    """The path of `src`'s object under _pl_objs/<target>/, without `.o`, so a/x.cu and b/x.cu differ:
    the source's path inside the target's package; else its path inside the main repository; else
    external/<repo>/<path inside its repository>.

    Never short_path as it is: a source from another repository has `../<repo>/<path>`, whose `..`
    left _pl_objs/<target>/ (the object became _pl_objs/<repo>/x.o), so two targets compiling one
    external source (tile variants) declared the same object and Bazel refused both.
    """
    path = src.short_path
    repo = ""
    if path.startswith("../"):
        repo, _, path = path[len("../"):].partition("/")
    stem = path.rsplit(".", 1)[0]
    pkg = label.package
    if repo == label.workspace_name and pkg and stem.startswith(pkg + "/"):
        return stem[len(pkg) + 1:]
    if repo == label.workspace_name and not pkg:
        return stem
    return "external/%s/%s" % (repo, stem) if repo else stem

def _check_object_stems(ctx, cu_srcs):
    """Two sources whose objects would share one path (x.cu of the package and external/r/x.cu of
    the main repository's package `external/r`) are refused instead of colliding in Bazel."""
    seen = {}
    for src in cu_srcs:
        stem = object_stem(src, ctx.label)
        if stem in seen:
            pl_fail(ctx, "B-SRCS", "attribute srcs: %s and %s would both compile to _pl_objs/%s/%s.o" %
                                   (seen[stem].short_path, src.short_path, ctx.label.name, stem),
                    "compile one of them in another cuda_component, or rename it")
        seen[stem] = src

def _cuda_component_impl(ctx):
    toolchain = cuda_toolchain(ctx)
    configured = ctx.attr._arch[PipelinkArchInfo].arch
    arch = configured
    if ctx.attr.arch:
        check_arch(ctx, ctx.attr.arch, hint = 'set arch = "%s", or drop `arch` to follow the kernel' % suggest_arch(ctx.attr.arch))
        if ctx.attr.arch != configured:
            pl_fail(ctx, "B-ARCH-MISMATCH", ("attribute arch pins the component to '%s' but it is being built for '%s' " +
                                             "(a fused_kernel's arch or --//pipelink_rules:arch)") % (ctx.attr.arch, configured),
                    "drop the `arch` attribute to let the kernel choose")
    check_files(ctx, "srcs", ctx.files.srcs, SRC_SUFFIXES, "list .cu translation units (and headers they include) in srcs")
    check_files(ctx, "hdrs", ctx.files.hdrs, HDR_SUFFIXES, "list only headers in hdrs; .cu files go in srcs")
    if not [f for f in ctx.files.srcs if f.basename.endswith(".cu")]:
        pl_fail(ctx, "B-SRCS", "attribute srcs has no .cu file (%s)" % (", ".join([f.short_path for f in ctx.files.srcs]) or "empty"),
                "list at least one .cu translation unit in srcs")
    contract = check_files(ctx, "contract", ctx.files.contract, [".contract.toml"],
                           "name the component's <component>.contract.toml (a .kernel.toml goes to fused_kernel)", single = True)
    if ctx.attr.host_provider:
        check_files(ctx, "host_provider", ctx.files.host_provider, [".py"],
                    "name the contract's [host] provider, a .py file defining provide(lent, facts, host)", single = True)
    component = check_component_name(ctx, ctx.attr.component or ctx.label.name, bool(ctx.attr.component))
    check_includes(ctx, ctx.attr.includes)
    check_substitutions(ctx, ctx.attr.contract_substitutions)

    # Headers and include directories: own hdrs, pipelink.h, cc_library deps, CUTLASS.
    pipelink_h = ctx.files._pipelink_header
    own_hdrs = ctx.files.hdrs
    dep_hdrs = []
    includes = [f.dirname for f in pipelink_h]
    pkg_root = ctx.label.package
    if ctx.label.workspace_root:
        pkg_root = ctx.label.workspace_root + ("/" + pkg_root if pkg_root else "")
    for inc in ctx.attr.includes:
        includes.append((pkg_root + "/" + inc).rstrip("/") if inc != "." else (pkg_root or "."))
        includes.append(ctx.bin_dir.path + "/" + pkg_root + ("/" + inc if inc != "." else ""))
    dep_defines = []
    for dep in ctx.attr.deps:
        cc = dep[CcInfo].compilation_context
        dep_hdrs.append(cc.headers)
        includes.extend(cc.includes.to_list())
        includes.extend(cc.quote_includes.to_list())
        includes.extend(cc.system_includes.to_list())
        dep_defines.extend(cc.defines.to_list())
    toolchain_hdrs = []
    if ctx.attr.cutlass:
        if not toolchain.cutlass_include_dir:
            pl_fail(ctx, "B-TOOLCHAIN", "attribute cutlass = True but the CUDA toolchain found no CUTLASS headers",
                    "install the nvidia-cutlass wheel (bash tools/setup.sh) or set pipelink_toolchains.cuda(cutlass_include = ...)")
        toolchain_hdrs.append(toolchain.cutlass_includes)
    includes = [i for i in _dedup(includes) if i]
    check_shell_paths(ctx, ctx.files.srcs, includes)
    check_defines(ctx, "defines", ctx.attr.defines, inherited = dep_defines)
    fact_defines = check_facts(ctx, ctx.attr.facts, dep_defines + ctx.attr.defines)
    defines = _dedup(dep_defines + ctx.attr.defines + fact_defines)
    user_copts = [ctx.expand_location(c, ctx.attr.deps) for c in ctx.attr.copts]
    check_copts(ctx, "copts", user_copts)

    headers = depset(own_hdrs + pipelink_h, transitive = dep_hdrs)

    objects = []
    _check_object_stems(ctx, [s for s in ctx.files.srcs if s.basename.endswith(".cu")])
    for src in ctx.files.srcs:
        if not src.basename.endswith(".cu"):
            continue  # headers listed in srcs are inputs, not translation units
        obj = ctx.actions.declare_file("_pl_objs/%s/%s.o" % (ctx.label.name, object_stem(src, ctx.label)))
        cuda_compile_action(
            ctx,
            toolchain = toolchain,
            src = src,
            hdrs = depset([f for f in ctx.files.srcs if not f.basename.endswith(".cu")], transitive = [headers]),
            includes = includes,
            defines = defines,
            copts = user_copts,
            arch = arch,
            out = obj,
            use_cutlass = ctx.attr.cutlass,
        )
        objects.append(obj)
    cu_srcs = [s for s in ctx.files.srcs if s.basename.endswith(".cu")]
    extra_hdrs = [s for s in ctx.files.srcs if not s.basename.endswith(".cu")]

    # What the control build needs to recompile the sources as one translation unit:
    # pipelink.h ships with the linker, CUTLASS with the toolchain; the rest rides along.
    recorded_copts = ["-I" + i for i in includes if i not in [f.dirname for f in pipelink_h]]
    if ctx.attr.cutlass:
        recorded_copts.append("-I" + toolchain.cutlass_include_dir)
    recorded_copts += ["-D" + d for d in defines] + user_copts
    packed_hdrs = depset(own_hdrs + extra_hdrs, transitive = dep_hdrs)

    package = ctx.actions.declare_file(ctx.label.name + ".plpkg")
    if ctx.attr.contract_substitutions or ctx.attr.facts:
        # One contract for several builds of a component (tile variants): each `facts` value
        # reaches the source as a define and the contract as its `own` value; pack checks
        # that the source's PL_OWN_FACT agrees.
        contract = _expand_contract(ctx, contract)
    packed_contract = contract
    if not PACK_ARCH_FLAG and arch != DEFAULT_ARCH:
        packed_contract = _retarget_contract(ctx, contract, arch)
    args = ctx.actions.args()
    args.add("pack")
    args.add("--contract", packed_contract)
    args.add_all(objects, before_each = "--object")
    args.add_all(cu_srcs, before_each = "--source")
    args.add_all(packed_hdrs, before_each = "--header")
    args.add_all(recorded_copts, format_each = "--copt=%s")
    if PACK_ARCH_FLAG:
        args.add("--arch", arch)
    if ORIGIN_FLAG:
        args.add("--origin", "%s=%s" % (packed_contract.path, display_label(ctx.label)))
    host_provider = ctx.files.host_provider[0] if ctx.files.host_provider else None
    if host_provider:
        args.add("--host-provider", host_provider)
    args.add("--out", package)
    args.add("--cuda-home", toolchain.cuda_home)
    run_pipelink(
        ctx,
        arguments = [args],
        # pack recompiles the carried sources with the recorded copts (P-REBUILD): it needs every
        # header the compile saw, the toolchain's (CUTLASS) included.
        inputs = depset([packed_contract] + objects + cu_srcs + ([host_provider] if host_provider else []),
                        transitive = [packed_hdrs, toolchain.nvcc_files] + toolchain_hdrs),
        outputs = [package],
        mnemonic = "PipelinkPack",
        progress_message = "Packing component %s (%%{label}) for %s" % (component, arch),
        env = pipelink_action_env(toolchain),
        origins = [(packed_contract, "the contract", ctx.label)],
    )

    info = CudaComponentInfo(
        package = package,
        component = component,
        contract = contract,
        packed_contract = packed_contract,
        objects = depset(objects),
        sources = depset(cu_srcs),
        headers = depset(transitive = [headers, depset(extra_hdrs)] + toolchain_hdrs),
        copts = recorded_copts,
        arch = arch,
        label = ctx.label,
    )
    return [
        DefaultInfo(files = depset([package])),
        OutputGroupInfo(objects = depset(objects), package = depset([package])),
        info,
    ]

def _expand_contract(ctx, contract):
    """The contract with `contract_substitutions` applied and the `facts` values as the owned
    facts' `own` values (same lines, so same file:line)."""
    out = ctx.actions.declare_file("_pl_contracts/%s/%s" % (ctx.label.name, contract.basename))
    subs = ctx.actions.declare_file("_pl_contracts/%s/substitutions.json" % ctx.label.name)
    ctx.actions.write(subs, json.encode(ctx.attr.contract_substitutions))
    inputs = [subs]
    arguments = [display_label(ctx.label), contract.path, out.path, subs.path]
    if ctx.attr.facts:
        facts = ctx.actions.declare_file("_pl_contracts/%s/facts.json" % ctx.label.name)
        ctx.actions.write(facts, json.encode(ctx.attr.facts))
        inputs.append(facts)
        arguments.append(facts.path)
    python = ctx.toolchains[PYTHON_TOOLCHAIN_TYPE].python
    script = ctx.file._substitute_contract
    ctx.actions.run(
        executable = python.interpreter,
        arguments = ["-s", script.path] + arguments,
        inputs = depset([script, contract] + inputs, transitive = [python.files]),
        outputs = [out],
        mnemonic = "PipelinkSubstitute",
        progress_message = "Substituting %{label}'s contract",
        toolchain = PYTHON_TOOLCHAIN_TYPE,
    )
    return out

def _retarget_contract(ctx, contract, arch):
    """Interim (until `pack --arch`): a copy of the contract with component.arch = arch.

    Only the `arch = "..."` line changes, so diagnostics' line numbers still match the
    source contract. `arch` is the only key of that name a contract has.
    """
    out = ctx.actions.declare_file("_pl_contracts/%s/%s" % (ctx.label.name, contract.basename))
    ctx.actions.run_shell(
        inputs = [contract],
        outputs = [out],
        command = """/usr/bin/sed -E 's/^([[:space:]]*arch[[:space:]]*=[[:space:]]*)"[^"]*"/\\1"%s"/' "$1" > "$2" """ % arch,
        arguments = [contract.path, out.path],
        mnemonic = "PipelinkContractArch",
        progress_message = "Retargeting contract %s to %s" % (contract.short_path, arch),
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        use_default_shell_env = False,
    )
    return out

def _dedup(xs):
    seen = {}
    out = []
    for x in xs:
        if x not in seen:
            seen[x] = True
            out.append(x)
    return out

cuda_component = rule(
    implementation = _cuda_component_impl,
    doc = "Compiles a pipelink component's CUDA sources to LTO-IR objects and packs them " +
          "with its contract into `<name>.plpkg` (provider CudaComponentInfo).",
    attrs = {
        "srcs": attr.label_list(
            allow_files = True,  # checked in the implementation (B-FILE-TYPE)
            doc = "CUDA sources; each .cu is one translation unit (one LTO-IR object). " +
                  "Headers listed here are inputs only.",
        ),
        "hdrs": attr.label_list(
            allow_files = True,  # checked in the implementation (B-FILE-TYPE)
            doc = "Headers the sources include (recorded in the package for the control build).",
        ),
        "contract": attr.label(
            allow_files = True,  # exactly one .contract.toml, checked in the implementation (B-FILE-TYPE)
            mandatory = True,
            doc = "The component's contract (<component>.contract.toml), see docs/CONTRACTS.md.",
        ),
        "contract_substitutions": attr.string_dict(
            doc = "Text substitutions applied to the contract before packing (e.g. another " +
                  "ring depth). For an owned fact's value use `facts`: it writes the value once.",
        ),
        "facts": attr.string_dict(
            doc = "Values of facts this component owns, each written once: fact name -> " +
                  "\"MACRO=VALUE\" (VALUE a u32 in decimal). The sources get -DMACRO=VALUE and " +
                  "the packed contract's [fact.<name>] gets own = VALUE; e.g. {\"block_n\": " +
                  "\"CONSUMER_BLOCK_N=64\"} for a tile variant. A bad entry is B-FACT, as is a fact " +
                  "whose table has no `own` (the component does not own it).",
        ),
        "host_provider": attr.label(
            allow_files = True,  # one .py, checked in the implementation (B-FILE-TYPE)
            doc = "The contract's [host] provider (Python), carried in the package.",
        ),
        "component": attr.string(
            doc = "The package name kernels refer to: the contract's component.name. " +
                  "Defaults to the target name.",
        ),
        "deps": attr.label_list(
            providers = [CcInfo],
            doc = "Header-only cc_library targets whose headers, includes and defines the " +
                  "sources use.",
        ),
        "includes": attr.string_list(
            doc = "Include directories relative to this package (as cc_library.includes).",
        ),
        "defines": attr.string_list(
            doc = "Preprocessor defines (NAME or NAME=VALUE) for this component's sources only. " +
                  "The value of a fact it owns (PL_OWN_FACT(tile, TILE)) goes in `facts` instead, " +
                  "which also writes it into the contract.",
        ),
        "copts": attr.string_list(
            doc = "Extra nvcc options for this component's sources ($(location) expanded " +
                  "against deps).",
        ),
        "cutlass": attr.bool(
            default = False,
            doc = "Compile against the toolchain's CUTLASS/CuTe headers.",
        ),
        "arch": attr.string(
            doc = "Optional pin (one of %s). Empty (the default) means: the configured " % SUPPORTED_ARCHS +
                  "//pipelink_rules:arch (sm_90a unless a fused_kernel or the command line " +
                  "sets it). A pinned component fails analysis when a kernel builds it for " +
                  "another architecture.",
        ),
        "_arch": attr.label(default = Label("//pipelink_rules:arch")),
        "_pipelink_header": attr.label(
            default = Label("//tools:pipelink_header"),
            allow_files = True,
        ),
        "_substitute_contract": attr.label(
            default = Label("//pipelink_rules/private:substitute_contract.py"),
            allow_single_file = True,
            doc = "Applies contract_substitutions and facts; a key the contract lacks is B-SUBST, " +
                  "a fact it does not own B-FACT.",
        ),
        "_linker": attr.label(
            default = Label("//tools:pipelink_linker_files"),
            cfg = "exec",
        ),
    },
    toolchains = [CUDA_TOOLCHAIN_TYPE, PYTHON_TOOLCHAIN_TYPE],
    provides = [CudaComponentInfo],
)
