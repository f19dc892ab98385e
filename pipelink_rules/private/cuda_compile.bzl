"""Compiling CUDA sources to LTO-IR objects with the pipelink CUDA toolchain."""

load(":arch.bzl", "check_arch")
load(":errors.bzl", "pl_fail")
load(":toolchain.bzl", "CUDA_TOOLCHAIN_TYPE", "find_cuda_toolchain")
load(":validate.bzl", "SHELL_QUOTED_CHARS", "check_copts", "check_defines", "check_files", "check_includes", "check_shell_paths", "non_ascii", "shell_chars")

def _arch_number(arch):
    """'sm_90a' / 'compute_90a' / '90a' -> '90a'."""
    for prefix in ["sm_", "compute_", "lto_"]:
        if arch.startswith(prefix):
            return arch[len(prefix):]
    return arch

def cuda_compile_action(ctx, toolchain, src, hdrs, includes, defines, copts, arch, out, use_cutlass = False):
    """Registers one nvcc action: `src` (.cu) -> `out`, a relocatable object holding LTO-IR.

    The command is `nvcc -dc -gencode arch=compute_<N>,code=lto_<N> -ccbin <host_compiler>`
    plus what makes the output bit-identical across runs and output bases:
    `-objtemp` (intermediate files are named after the output, not tmpxft_<pid>_...),
    `-frandom-seed=<out.short_path>` (fixed ids for anonymous names; nvcc passes it to gcc
    too), and nvcc run through the toolchain's nvcc_wrapper.sh from a fixed directory
    (nvcc hashes the absolute path of the source into the module id and the LTO-IR).

    Args:
      ctx: the rule context (only ctx.actions is used).
      toolchain: CudaToolchainInfo (e.g. find_cuda_toolchain(ctx)); a resolved ToolchainInfo also works.
      src: File, the .cu source.
      hdrs: list or depset of File the source may include.
      includes: list of string, execroot-relative directories passed as -I.
      defines: list of string, passed as -D.
      copts: list of string, extra nvcc flags, appended last.
      arch: string, "sm_90a" (or "90a"); the object holds LTO-IR for this arch only.
      out: the declared output File (e.g. ctx.actions.declare_file(name + ".o")).
      use_cutlass: if True, add the toolchain's CUTLASS/CuTe headers as inputs and -I.

    Returns:
      out.
    """
    if hasattr(toolchain, "cuda"):  # a resolved ToolchainInfo rather than its CudaToolchainInfo
        toolchain = toolchain.cuda
    num = _arch_number(arch)
    hdr_depset = hdrs if type(hdrs) == "depset" else depset(hdrs)
    transitive = [hdr_depset, toolchain.nvcc_files]

    args = ctx.actions.args()
    args.add("-dc")
    args.add("-gencode=arch=compute_{0},code=lto_{0}".format(num))
    args.add("-ccbin", toolchain.host_compiler)
    args.add("-objtemp")
    args.add("-frandom-seed=" + out.short_path)
    args.add_all(toolchain.copts)
    args.add_all(includes, format_each = "-I%s", uniquify = True)
    if use_cutlass:
        if not toolchain.cutlass_include_dir:
            pl_fail(ctx, "B-TOOLCHAIN", "use_cutlass requested but the CUDA toolchain has no CUTLASS headers",
                    "bash tools/setup.sh (installs nvidia-cutlass) or set PIPELINK_CUTLASS_INCLUDE")
        args.add("-I" + toolchain.cutlass_include_dir)
        transitive.append(toolchain.cutlass_includes)
    args.add_all(defines, format_each = "-D%s")
    args.add_all(copts)
    args.add("-o", out)
    args.add(src)

    # nvcc_wrapper.sh KEY SRC OUT NVCC args...: runs nvcc from /tmp/pipelink-nvcc/KEY.
    wrapper_args = ctx.actions.args()
    wrapper_args.add("%s-%x" % (out.basename, hash(out.path) % 4294967296))
    wrapper_args.add(src)
    wrapper_args.add(out)
    wrapper_args.add(toolchain.nvcc)

    ctx.actions.run(
        executable = toolchain.nvcc_wrapper,
        arguments = [wrapper_args, args],
        inputs = depset([src, toolchain.nvcc], transitive = transitive),
        outputs = [out],
        mnemonic = "CudaCompile",
        # The fixed PATH of --incompatible_strict_action_env: g++ runs `as` and `ld` from it.
        use_default_shell_env = True,
        progress_message = "Compiling %s to LTO-IR for %s" % (src.short_path, arch),
        toolchain = CUDA_TOOLCHAIN_TYPE,
    )
    return out

def _package_dirs(ctx, dirs):
    """Package-relative include dirs -> execroot-relative (source and generated trees)."""
    base = "/".join([p for p in [ctx.label.workspace_root, ctx.label.package] if p])
    out = []
    for d in dirs:
        path = base + "/" + d if d not in ["", "."] else (base or ".")
        out.append(path)
        out.append(ctx.bin_dir.path + "/" + path)
    return out

def _cuda_ltoir_impl(ctx):
    check_arch(ctx, ctx.attr.arch)
    src = check_files(ctx, "src", ctx.files.src, [".cu"], "name one .cu file", single = True)
    check_files(ctx, "hdrs", ctx.files.hdrs, [".h", ".hpp", ".cuh", ".inc"], "list only headers in hdrs")
    check_includes(ctx, ctx.attr.includes)
    check_defines(ctx, "defines", ctx.attr.defines)
    check_copts(ctx, "copts", ctx.attr.copts)
    out_name = ctx.attr.out
    if out_name and (not out_name.endswith(".o") or out_name.startswith("/") or ".." in out_name.split("/")):
        pl_fail(ctx, "B-FILE-TYPE", "attribute out: '%s' is not a .o file name inside this package" % out_name,
                "give a relative name ending in .o, or drop `out` for <name>.o")
    check_shell_paths(ctx, [src], _package_dirs(ctx, ctx.attr.includes))
    if out_name:
        bad = shell_chars(out_name, SHELL_QUOTED_CHARS) + non_ascii(out_name)
        if bad:
            pl_fail(ctx, "B-FILE-TYPE", "attribute out: '%s' holds %s, which nvcc's shell would expand or Bazel 7 would encode twice" %
                                        (out_name, " ".join(["'%s'" % c for c in bad])),
                    "give a relative name ending in .o, of letters, digits and _ - . /")
    toolchain = find_cuda_toolchain(ctx)
    out = ctx.actions.declare_file(ctx.attr.out or (ctx.label.name + ".o"))
    cuda_compile_action(
        ctx,
        toolchain,
        src = src,
        hdrs = ctx.files.hdrs,
        includes = _package_dirs(ctx, ctx.attr.includes),
        defines = ctx.attr.defines,
        copts = ctx.attr.copts,
        arch = ctx.attr.arch,
        out = out,
        use_cutlass = ctx.attr.use_cutlass,
    )
    return [DefaultInfo(files = depset([out]))]

cuda_ltoir = rule(
    implementation = _cuda_ltoir_impl,
    doc = "Compiles one .cu file to a relocatable object holding LTO-IR (nvcc -dc, code=lto_<arch>).",
    attrs = {
        "src": attr.label(allow_files = True, mandatory = True, doc = "One .cu file (checked: B-FILE-TYPE)."),
        "hdrs": attr.label_list(allow_files = True, doc = "Headers (checked: B-FILE-TYPE)."),
        "includes": attr.string_list(doc = "Include directories relative to this package."),
        "defines": attr.string_list(),
        "copts": attr.string_list(doc = "Extra nvcc flags."),
        "arch": attr.string(default = "sm_90a"),
        "use_cutlass": attr.bool(default = False),
        "out": attr.string(doc = "Output file name; default <name>.o."),
    },
    toolchains = [CUDA_TOOLCHAIN_TYPE],
)
