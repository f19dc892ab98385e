"""The MoE megakernel (kernels/moe/): one persistent kernel of four owners' roles and a
SwiGLU library.

    moe_expert(name = "moe_expert_bm64", block_m = 64)      # the expert owner, one geometry
    moe_step(name = "moe_step_bm64", expert = ":moe_expert_bm64")

The expert owner's tile geometry is one number each: its defines (EXPERT_BLOCK_*) and its
contract's `own` values come from it (cuda_component's `facts`), so a geometry mutation is
one rebuilt package; the other owners read the facts through handles and only relink.

moe_expert and moe_step name their files and default owners by //kernels labels (plain
strings, so they resolve in the calling repository), so experiments/ can build them too.
"""

load("//pipelink_rules:defs.bzl", "cuda_component", "fused_kernel", "fused_kernel_sass_test")
load("//pipelink_rules/private:validate.bzl", "check_variant")
load(":moe_models.bzl", "MOE_MODELS", "moe_model_facts")

MOE_HDRS = ["moe/moe_shapes.h", "moe/warp_mma.h"]

def moe_components():
    """The packages of the owners other than the expert: router (R), dispatch (D), combine
    (C) and the two SwiGLU builds (G, G2). One macro, so a workspace that mutates the expert
    (tests/e2e/test_moe_relink.py) builds exactly these."""
    _moe_roles("")
    cuda_component(
        name = "moe_swiglu",
        srcs = ["moe/swiglu.cu"],
        hdrs = ["moe/expert_acc.h"],
        contract = "moe/swiglu.contract.toml",
        copts = ["-O3"],
    )

    # G2: written independently, same interface (package name moe_swiglu), links unchanged.
    cuda_component(
        name = "moe_swiglu2",
        component = "moe_swiglu",
        srcs = ["moe/swiglu2.cu"],
        contract = "moe/swiglu2.contract.toml",
        copts = ["-O3"],
    )

    # R2: DeepSeek-V3's grouped-sigmoid routing, the same interface (package name moe_router):
    # the router a model's composition picks (moe_step(router = ...)).
    cuda_component(
        name = "moe_router_grouped",
        component = "moe_router",
        srcs = ["moe/router_grouped.cu"],
        hdrs = MOE_HDRS + ["moe/router_common.h"],
        contract = "moe/router_grouped.contract.toml",
        copts = ["-O3"],
    )

    # gpt-oss's clamped SwiGLU: the same interface, the activation a model's composition picks.
    cuda_component(
        name = "moe_swiglu_clamped",
        component = "moe_swiglu",
        srcs = ["moe/swiglu_clamped.cu"],
        hdrs = ["moe/expert_acc.h"],
        contract = "moe/swiglu_clamped.contract.toml",
        copts = ["-O3"],
    )

def moe_trace_step(name = "moe_step_trace"):
    """moe_step built with MOE_TRACE: every role folds %globaltimer into phase slots of the
    `sync` workspace (moe_shapes.h, moe::stamp); benchmarks/moe_trace.py reads them. A
    diagnostic build of the same sources, not a product target: `manual`, so `//...` (and CI)
    skip it; build it by name."""
    _moe_roles("_trace", ["MOE_TRACE"], tags = ["manual"])
    moe_expert(name = "moe_expert_trace", defines = ["MOE_TRACE"], tags = ["manual"])
    moe_step(
        name = name,
        expert = ":moe_expert_trace",
        router = ":moe_router_trace",
        dispatch = ":moe_dispatch_trace",
        combine = ":moe_combine_trace",
        sass_test = False,
        tags = ["manual"],
        # the stamps cost the roles registers: ptxas spills 8 B (two words) at 128 per thread.
        # A diagnostic build, so a warning; the product build links with none (L-REGS).
        spills = "warning",
    )

def _moe_roles(suffix, defines = [], tags = []):
    """Router (R), dispatch (D) and combine (C): one package each, named <package><suffix>."""
    for role, hdrs in (("router", MOE_HDRS + ["moe/router_common.h"]), ("dispatch", MOE_HDRS), ("combine", ["moe/moe_shapes.h"])):
        cuda_component(
            name = "moe_" + role + suffix,
            component = "moe_" + role,
            srcs = ["moe/%s.cu" % role],
            hdrs = hdrs,
            contract = "moe/%s.contract.toml" % role,
            copts = ["-O3"],
            defines = defines,
            tags = tags,
        )

def moe_expert(name, block_m = 64, block_h = 64, block_n = 128, stages = 4, defines = [], tags = []):
    """The expert owner with one tile geometry: block_m in {16, 32, 64} (rows of a tile; the
    wgmma is m64, rows beyond block_m are zero), block_h in {32, 64}, block_n in {64, 128};
    stages (ring stages per warpgroup, fact expert_stages: it sizes the smem claims) in 2..12."""
    for what, value, ok in (("block_m", block_m, [16, 32, 64]), ("block_h", block_h, [32, 64]),
                            ("block_n", block_n, [64, 128]), ("stages", stages, list(range(2, 13)))):
        check_variant("//%s:%s" % (native.package_name(), name), "moe_expert " + what, repr(value), [repr(v) for v in ok])
    cuda_component(
        name = name,
        component = "moe_expert",
        srcs = ["//kernels:moe/expert.cu"],
        hdrs = ["//kernels:" + h for h in MOE_HDRS + ["gemm/wgmma.h"]],
        cutlass = True,
        contract = "//kernels:moe/expert.contract.toml",
        host_provider = "//kernels:moe/expert_host.py",
        facts = {
            "block_m": "EXPERT_BLOCK_M=%d" % block_m,
            "block_h": "EXPERT_BLOCK_H=%d" % block_h,
            "block_n": "EXPERT_BLOCK_N=%d" % block_n,
            "expert_stages": "EXPERT_STAGES=%d" % stages,
        },
        copts = ["-O3"],
        defines = defines,
        tags = tags,
    )

def moe_step(name, expert = "//kernels:moe_expert", swiglu = "//kernels:moe_swiglu", router = "//kernels:moe_router",
             dispatch = "//kernels:moe_dispatch", combine = "//kernels:moe_combine", sass_test = True, tags = [],
             spills = "error", model = "qwen3_30b_a3b", router_facts = {}):
    """The step of `model` (a MOE_MODELS key, kernels/moe_models.bzl): the same packages, the
    model's shape as the kernel file's facts. router_facts: the facts only another router
    reads (moe_router_grouped: groups, topk_groups), added to the model's."""
    fused_kernel(
        name = name,
        arch = "sm_90a",
        components = [router, dispatch, expert, swiglu, combine],
        kernel = "//kernels:moe/moe_step.kernel.toml",
        facts = moe_model_facts(model) | router_facts,
        visibility = ["//visibility:public"],
        tags = tags,
        spills = spills,
    )
    if sass_test:
        # Linked SASS == the single-unit control's. (It differed while the control was
        # whole-program nvcc, another optimiser pipeline than LTO; docs/ARCHITECTURE.md.)
        fused_kernel_sass_test(
            name = name + "_sass_test",
            kernel = ":" + name,
        )

def moe_models():
    """One fused_kernel per served model (qwen3_30b_a3b is //kernels:moe_step, built beside
    its trace and swiglu2 variants in kernels/BUILD.bazel), and the alias by model name."""
    for model, m in MOE_MODELS.items():
        if not m["served"]:
            continue
        if m["target"] != "moe_step":
            moe_step(name = m["target"], model = model, router = "//kernels:" + m["router"], swiglu = "//kernels:" + m["activation"])
        if m["target"] != model:
            native.alias(name = model, actual = ":" + m["target"], visibility = ["//visibility:public"])
