"""Tile variants of the Hopper GEMM + SwiGLU kernel, each a fused_kernel target.

    gemm_swiglu_tma(name = "gemm_swiglu_tma_bn64", block_n = 64)

builds the wgmma consumer (owner B) for the variant (its define and its contract's `own`
value from one number: cuda_component's `facts`) and links it with the shared scheduler, TMA
loader and SwiGLU epilogue packages, plus the SASS test against the single-unit control.
`consumer = "cute"` builds the CuTe consumer (owner D, kernels/gemm/cute_consumer.cu, with
the toolchain's CUTLASS headers) in its place; its kernel file names package cute_consumer.
`consumer = "pingpong"` builds the ping-pong consumer (owner B, kernels/gemm/wgmma_pingpong.cu).
"""

load("//pipelink_rules:defs.bzl", "cuda_component", "fused_kernel", "fused_kernel_sass_test")
load("//pipelink_rules/private:validate.bzl", "check_variant")

# Consumers of ring `ab` (owner B's two, owner D's CuTe one): source and headers. A variant's
# tile sizes reach the build and the contract through `facts`.
_CONSUMERS = {
    "wgmma": struct(component = "wgmma_consumer", hdrs = ["gemm/ring_consumer.h", "gemm/tma_gemm.h", "gemm/wgmma.h"], cutlass = True),
    "cute": struct(component = "cute_consumer", hdrs = ["gemm/ring_consumer.h", "gemm/tma_gemm.h"], cutlass = True),
    "pingpong": struct(component = "wgmma_pingpong", hdrs = ["gemm/ring_consumer.h", "gemm/tma_gemm.h", "gemm/wgmma.h"], cutlass = True),
}

def gemm_swiglu_tma(name, block_n, epilogue = ":swiglu_tma_store", scheduler = ":tile_scheduler",
                    kernel = "gemm_swiglu/gemm_swiglu_tma.kernel.toml", consumer = "wgmma", block_m = 128):
    """One GEMM + SwiGLU variant. consumer: "wgmma" (two cooperative warpgroups on a
    128-row tile), "cute" (the same, written with CuTe) or "pingpong" (each warpgroup a
    whole block_m x block_n tile; needs the per-warpgroup epilogue and kernel file)."""
    where = "//%s:%s" % (native.package_name(), name)
    check_variant(where, "gemm_swiglu_tma consumer", repr(consumer), [repr(c) for c in sorted(_CONSUMERS.keys())])
    shapes = [(128, 64), (64, 128)] if consumer == "pingpong" else [(128, 64), (128, 128)]
    check_variant(where, "gemm_swiglu_tma block_m x block_n (%s consumer)" % consumer, "%r x %r" % (block_m, block_n),
                  ["%d x %d" % s for s in shapes])
    c = _CONSUMERS[consumer]
    consumer_target = name + "_consumer"
    if consumer == "pingpong":
        facts = {"block_m": "PINGPONG_BLOCK_M=%d" % block_m, "block_n": "PINGPONG_BLOCK_N=%d" % block_n}
    else:
        facts = {"block_n": "CONSUMER_BLOCK_N=%d" % block_n, "b_parts": "CONSUMER_B_PARTS=2"}
    cuda_component(
        name = consumer_target,
        component = c.component,
        srcs = ["gemm/%s.cu" % c.component],
        hdrs = c.hdrs,
        contract = "gemm/%s.contract.toml" % c.component,
        facts = facts,
        copts = ["-O3"],
        cutlass = c.cutlass,
    )
    fused_kernel(
        name = name,
        arch = "sm_90a",
        components = [scheduler, ":tma_loader", ":" + consumer_target, epilogue],
        kernel = kernel,
        visibility = ["//visibility:public"],
    )
    fused_kernel_sass_test(
        name = name + "_sass_test",
        kernel = ":" + name,
    )
