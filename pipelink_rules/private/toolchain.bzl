"""The cuda_toolchain rule: turns the @local_cuda files into a CudaToolchainInfo."""

load(":errors.bzl", "pl_fail")
load(":providers.bzl", "CudaToolchainInfo")

def split_fix(reason):
    """(what was tried, the fix) of a detection report "what was tried. Fix: what to do". At the
    last " Fix: ": the paths tried, before it, are the machine's and may hold one."""
    message, sep, fix = reason.rpartition(" Fix: ")
    return (message, fix) if sep else (reason, "")

def toolchain_fail(ctx, reason, default_hint):
    """B-TOOLCHAIN from a detection report "what was tried. Fix: what to do"."""
    message, fix = split_fix(reason)
    pl_fail(ctx, "B-TOOLCHAIN", message, fix.rstrip(".") or default_hint)

CUDA_TOOLCHAIN_TYPE = Label("//pipelink_rules:cuda_toolchain_type")

def _cuda_toolchain_impl(ctx):
    if ctx.attr.missing_reason:
        toolchain_fail(ctx, ctx.attr.missing_reason, "pipelink_toolchains.cuda(path = <CUDA 13 toolkit root>) in MODULE.bazel")
    if not ctx.attr.host_compiler:
        pl_fail(ctx, "B-TOOLCHAIN", "no host C++ compiler for nvcc (g++ <= 15) was found",
                "bash tools/setup.sh (the Bazel root carries g++-14), or set PIPELINK_HOST_COMPILER or pipelink_toolchains.cuda(host_compiler = ...)")
    nvcc = ctx.file.nvcc

    # nvcc is <root>/bin/nvcc; <root> is execroot-relative (external/<repo>).
    cuda_home = nvcc.dirname.rpartition("/")[0]
    cutlass_dir = ""
    if ctx.attr.cutlass_include_dir:
        cutlass_dir = ctx.label.workspace_root + "/" + ctx.attr.cutlass_include_dir
    info = CudaToolchainInfo(
        nvcc = nvcc,
        nvcc_wrapper = ctx.executable._nvcc_wrapper,
        nvcc_files = depset([nvcc], transitive = [ctx.attr.nvcc_files[DefaultInfo].files]),
        cuobjdump = ctx.file.cuobjdump,
        nvdisasm = ctx.file.nvdisasm,
        nvjitlink = ctx.file.nvjitlink,
        cuda_home = cuda_home,
        host_compiler = ctx.attr.host_compiler,
        cutlass_includes = ctx.attr.cutlass_headers[DefaultInfo].files if ctx.attr.cutlass_headers else depset(),
        cutlass_include_dir = cutlass_dir,
        version = ctx.attr.version,
        copts = ctx.attr.copts,
    )
    return [platform_common.ToolchainInfo(cuda = info), info]

cuda_toolchain = rule(
    implementation = _cuda_toolchain_impl,
    doc = "A CUDA toolkit for pipelink rules. Instances are generated in @local_cuda.",
    attrs = {
        "nvcc": attr.label(allow_single_file = True, cfg = "exec", executable = True),
        "nvcc_files": attr.label(cfg = "exec"),
        "cuobjdump": attr.label(allow_single_file = True, cfg = "exec", executable = True),
        "nvdisasm": attr.label(allow_single_file = True, cfg = "exec", executable = True),
        "nvjitlink": attr.label(allow_single_file = True, cfg = "exec"),
        "cutlass_headers": attr.label(),
        "cutlass_include_dir": attr.string(doc = "Directory of the CUTLASS headers, relative to this repo ('' if none)."),
        "host_compiler": attr.string(doc = "Absolute path of the g++ nvcc runs (-ccbin)."),
        "version": attr.string(),
        "copts": attr.string_list(doc = "nvcc flags every compile with this toolkit and host compiler needs."),
        "_nvcc_wrapper": attr.label(
            default = Label("//pipelink_rules/private:nvcc_wrapper.sh"),
            allow_single_file = True,
            executable = True,
            cfg = "exec",
        ),
        "missing_reason": attr.string(doc = "If set, the toolkit was not found: fail with this message when used."),
    },
    provides = [platform_common.ToolchainInfo, CudaToolchainInfo],
)

def find_cuda_toolchain(ctx):
    """The CudaToolchainInfo of the resolved //pipelink_rules:cuda_toolchain_type toolchain.

    The calling rule must declare `toolchains = [CUDA_TOOLCHAIN_TYPE]`.
    """
    return ctx.toolchains[CUDA_TOOLCHAIN_TYPE].cuda
