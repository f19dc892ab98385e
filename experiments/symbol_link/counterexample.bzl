"""The symbol-linking counterexample (issue 9): geometry mutations of one owner, linked twice.

    symbol_link_mutations(
        name = "gemm_swiglu_tma_mutations",
        kernel = "//kernels:gemm_swiglu_tma",     # the ORIGINAL composition (a fused_kernel)
        mutations = [
            mutation("consumer_bn32", owner = "main", what = "CONSUMER_BLOCK_N=32",
                     component = dict(component = "wgmma_consumer", srcs = [...], defines = [...], ...)),
            mutation("consumer_bn64", owner = "main", what = "...", target = ":existing_component"),
        ],
    )

Each mutation is one owner's component rebuilt with a different tile define (a cuda_component
this macro declares from `component`, or an existing `target`). For each, two Bazel actions
(experiments/symbol_link/plainlink.py, an experiment path, not a user feature):
  PlainLink      the ORIGINAL composition's glue (old facts, smem placement, ring sizes baked
                 in) + the mutant's LTO-IR, nvJitLink, no contract check
                 -> <name>/<m>.plain.cubin, <name>/<m>.plain.manifest.json
  MutantLink     pipelink on the MUTATED composition: propagated (a normal link) or rejected,
                 recorded as data so the build succeeds either way
                 -> <name>/<m>.pipelink.json (+ .cubin/.manifest.json, empty when rejected)
and one index <name>.json that experiments/symbol_link/symbol_link_counterexample.py reads from
bazel-bin/experiments.
Adding a kernel's mutations is one more call with its table.
"""

load("//pipelink_rules:defs.bzl", "cuda_component")
load("//pipelink_rules/private:arch.bzl", "arch_transition", "check_arch")
load("//pipelink_rules/private:errors.bzl", "display_label", "pl_fail")
load("//pipelink_rules/private:cuda_component.bzl", "cuda_toolchain", "pipelink_action_env")
load("//pipelink_rules/private:providers.bzl", "CudaComponentInfo", "FusedKernelInfo")
load("//pipelink_rules/private:python_toolchain.bzl", "PYTHON_TOOLCHAIN_TYPE", "linker_invocation")
load("//pipelink_rules/private:toolchain.bzl", "CUDA_TOOLCHAIN_TYPE")

def mutation(name, owner, what, component = None, target = None):
    """One row of the table: `owner` is the kernel file's instance name of the mutated owner."""
    if (component == None) == (target == None):
        pl_fail("mutation " + name, "B-MUTATION", "gives %s of component and target" % ("both" if component else "neither"),
                "give exactly one: component = dict(cuda_component kwargs) or target = \":label\"")
    return struct(name = name, owner = owner, what = what, component = component, target = target)

_ROW_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"

def check_mutation_rows(where, mutations):
    """B-MUTATION: each row's name is unique and path-safe (it names the row's cuda_component,
    <name>__<row>, and its output files), each a mutation() struct. Raised while the BUILD file
    loads, before Bazel's own "duplicate target" or "declared twice" errors could."""
    seen = {}
    for m in mutations:
        if type(m) != "struct" or not hasattr(m, "owner"):
            pl_fail(where, "B-MUTATION", "a row of mutations is %r, not a mutation(...)" % (m,),
                    "write each row as mutation(name, owner = ..., what = ..., component = dict(...) or target = \":label\")")
        if not m.name or [ch for ch in m.name.elems() if ch not in _ROW_NAME_CHARS] or m.name in [".", ".."]:
            pl_fail(where, "B-MUTATION", "row name %r is empty or not made of letters, digits and _ . -" % m.name,
                    "name the row like \"consumer_bn64\" (it names the row's files and component)")
        if m.name in seen:
            pl_fail(where, "B-MUTATION", "two rows are named %r" % m.name, "give each row its own name")
        seen[m.name] = True

def symbol_link_mutations(name, kernel, mutations, arch = "sm_90a", tags = None):
    check_mutation_rows("//%s:%s" % (native.package_name(), name), mutations)
    labels = []
    for m in mutations:
        if m.target:
            labels.append(m.target)
        else:
            comp = name + "__" + m.name
            cuda_component(name = comp, tags = tags, **m.component)
            labels.append(":" + comp)
    _symbol_link_mutations(
        name = name,
        kernel = kernel,
        mutants = labels,
        mutation_names = [m.name for m in mutations],
        owners = [m.owner for m in mutations],
        whats = [m.what for m in mutations],
        arch = arch,
        tags = tags,
    )

def _impl(ctx):
    info = ctx.attr.kernel[FusedKernelInfo]
    check_arch(ctx, ctx.attr.arch)
    if info.arch != ctx.attr.arch:
        pl_fail(ctx, "B-ARCH-MISMATCH", "attribute arch is '%s' but kernel %s is built for '%s'; the mutants would be compiled for another arch than the packages they replace" %
                                        (ctx.attr.arch, display_label(ctx.attr.kernel.label), info.arch),
                'set arch = "%s" (the kernel\'s)' % info.arch)
    toolchain = cuda_toolchain(ctx)
    argv, linker_files, pythonpath, _ = linker_invocation(ctx)
    plainlink = ctx.file._plainlink
    argv = argv[:-2] + [plainlink.path]  # the experiment's script (pipelink on PYTHONPATH), not the CLI
    env = dict(pipelink_action_env(toolchain))
    env["PYTHONPATH"] = pythonpath
    n = len(ctx.attr.mutation_names)
    if len(ctx.attr.mutants) != n or len(ctx.attr.owners) != n or len(ctx.attr.whats) != n:
        pl_fail(ctx, "B-MUTATION", "mutants, mutation_names, owners and whats have %d, %d, %d and %d entries" %
                (len(ctx.attr.mutants), n, len(ctx.attr.owners), len(ctx.attr.whats)),
                "declare the rows through symbol_link_mutations(mutations = [mutation(...), ...])")
    inputs = depset([info.kernel, plainlink], transitive = [info.packages, toolchain.nvcc_files, linker_files])
    rows = []
    outs_all = []
    for i in range(n):
        m = ctx.attr.mutation_names[i]
        c = ctx.attr.mutants[i][CudaComponentInfo]
        f = {k: ctx.actions.declare_file("%s/%s.%s" % (ctx.label.name, m, k)) for k in [
            "plain.cubin",
            "plain.manifest.json",
            "pipelink.cubin",
            "pipelink.manifest.json",
            "pipelink.json",
        ]}
        base = ["--kernel", info.kernel.path, "--arch", info.arch, "--cuda-home", toolchain.cuda_home,
                "--mutant", c.package.path]
        for p in info.packages.to_list():
            base += ["--package", p.path]
        mut_inputs = depset([c.package], transitive = [inputs])
        ctx.actions.run_shell(
            command = '"$@" > /dev/null',
            arguments = argv + ["plain"] + base + ["--cubin", f["plain.cubin"].path,
                                                   "--manifest", f["plain.manifest.json"].path],
            inputs = mut_inputs,
            outputs = [f["plain.cubin"], f["plain.manifest.json"]],
            mnemonic = "PlainLink",
            progress_message = "Plain symbol link of %s with mutant %s (experiment)" % (info.name, m),
            env = env,
            use_default_shell_env = False,
        )
        ctx.actions.run_shell(
            command = '"$@" > /dev/null',
            arguments = argv + ["contracted"] + base + ["--cubin", f["pipelink.cubin"].path,
                                                        "--manifest", f["pipelink.manifest.json"].path,
                                                        "--result", f["pipelink.json"].path],
            inputs = mut_inputs,
            outputs = [f["pipelink.cubin"], f["pipelink.manifest.json"], f["pipelink.json"]],
            mnemonic = "MutantLink",
            progress_message = "pipelink link of %s with mutant %s (experiment)" % (info.name, m),
            env = env,
            use_default_shell_env = False,
        )
        outs_all += f.values()
        rows.append({
            "name": m,
            "owner": ctx.attr.owners[i],
            "package": c.component,
            "what": ctx.attr.whats[i],
            "mutant": str(c.label),
            "files": {k: v.short_path for k, v in f.items()},
        })
    index = ctx.actions.declare_file(ctx.label.name + ".json")
    ctx.actions.write(index, json.encode_indent({
        "format": 1,
        "kernel": info.name,
        "arch": info.arch,
        "original": {"cubin": info.cubin.short_path, "manifest": info.manifest.short_path},
        "mutations": rows,
    }, indent = " ") + "\n")
    return [DefaultInfo(files = depset([index, info.cubin, info.manifest] + outs_all))]

_symbol_link_mutations = rule(
    implementation = _impl,
    doc = "Plain-link and pipelink-link each mutant against the original kernel (experiment).",
    attrs = {
        "kernel": attr.label(providers = [FusedKernelInfo], mandatory = True),
        "mutants": attr.label_list(providers = [CudaComponentInfo], cfg = arch_transition),
        "mutation_names": attr.string_list(),
        "owners": attr.string_list(),
        "whats": attr.string_list(),
        "arch": attr.string(default = "sm_90a"),
        "_linker": attr.label(default = Label("//tools:pipelink_linker_files"), cfg = "exec"),
        "_plainlink": attr.label(default = Label("//experiments/symbol_link:plainlink.py"), allow_single_file = True, cfg = "exec"),
        "_allowlist_function_transition": attr.label(
            default = "@bazel_tools//tools/allowlists/function_transition_allowlist",
        ),
    },
    toolchains = [CUDA_TOOLCHAIN_TYPE, PYTHON_TOOLCHAIN_TYPE],
)

def _consumer(block_n, parts):
    # wgmma_consumer (owner B) rebuilt with other tile sizes: defines and `own` values from `facts`.
    return dict(
        component = "wgmma_consumer",
        srcs = ["//kernels:gemm/wgmma_consumer.cu"],
        hdrs = ["//kernels:gemm/ring_consumer.h", "//kernels:gemm/tma_gemm.h", "//kernels:gemm/wgmma.h"],
        cutlass = True,
        contract = "//kernels:gemm/wgmma_consumer.contract.toml",
        facts = {"block_n": "CONSUMER_BLOCK_N=%d" % block_n, "b_parts": "CONSUMER_B_PARTS=%d" % parts},
        copts = ["-O3"],
    )

# The GEMM + SwiGLU TMA kernel (block_n 128, b_parts 2, stream-K scheduler with GROUP_M 8):
# five mutations, one owner each.
GEMM_SWIGLU_TMA_MUTATIONS = [
    mutation("consumer_bn64", owner = "main", what = "wgmma_consumer CONSUMER_BLOCK_N 128 -> 64",
             target = "//kernels:gemm_swiglu_tma_bn64_consumer"),
    mutation("consumer_bn32", owner = "main", what = "wgmma_consumer CONSUMER_BLOCK_N 128 -> 32",
             component = _consumer(32, 2)),
    mutation("consumer_parts1", owner = "main", what = "wgmma_consumer CONSUMER_B_PARTS 2 -> 1",
             component = _consumer(128, 1)),
    mutation("consumer_bn256_parts1", owner = "main",
             what = "wgmma_consumer CONSUMER_BLOCK_N 128 -> 256, CONSUMER_B_PARTS 2 -> 1 (same stage bytes)",
             component = _consumer(256, 1)),
    mutation("scheduler_group4", owner = "sched", what = "tile_scheduler TILE_SCHEDULER_GROUP_M 8 -> 4",
             component = dict(component = "tile_scheduler", srcs = ["//kernels:gemm/tile_scheduler.cu"],
                              contract = "//kernels:gemm/tile_scheduler.contract.toml", copts = ["-O3"],
                              defines = ["TILE_SCHEDULER_GROUP_M=4"])),
]
