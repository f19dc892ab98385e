"""Tile variants of the Hopper GEMM + SwiGLU kernel, each a fused_kernel target.

    gemm_swiglu_tma(name = "gemm_swiglu_tma_bn64", block_n = 64)

builds the wgmma consumer (owner B) for the variant (its define and its contract's
`own` value from one number) and links it with the shared scheduler, TMA loader and
SwiGLU epilogue packages, plus the SASS test against the single-unit control.
"""

load("//pipelink_rules:defs.bzl", "cuda_component", "fused_kernel", "fused_kernel_sass_test")

def gemm_swiglu_tma(name, block_n, epilogue = ":swiglu_tma_store", scheduler = ":tile_scheduler",
                    kernel = "gemm_swiglu/gemm_swiglu_tma.kernel.toml", pingpong = False, block_m = 128):
    """One GEMM + SwiGLU variant: cooperative consumers (block_m = 128) by default, or the
    ping-pong consumers (block_m x block_n per warpgroup; whole tiles: a scheduler built
    without stream-K, the per-warpgroup epilogue and the ping-pong kernel file)."""
    consumer = name + "_consumer"
    if pingpong:
        cuda_component(
            name = consumer,
            component = "wgmma_pingpong",
            srcs = ["gemm/wgmma_pingpong.cu"],
            hdrs = ["gemm/tma_gemm.h", "gemm/wgmma.h"],
            contract = "gemm/wgmma_pingpong.contract.toml",
            contract_substitutions = {
                "128  # variant: BLOCK_M": "%d  # variant: BLOCK_M" % block_m,
                "64  # variant: BLOCK_N": "%d  # variant: BLOCK_N" % block_n,
            },
            copts = ["-O3"],
            defines = ["PINGPONG_BLOCK_M=%d" % block_m, "PINGPONG_BLOCK_N=%d" % block_n],
        )
    else:
        cuda_component(
            name = consumer,
            component = "wgmma_consumer",
            srcs = ["gemm/wgmma_consumer.cu"],
            hdrs = ["gemm/tma_gemm.h", "gemm/wgmma.h"],
            contract = "gemm/wgmma_consumer.contract.toml",
            contract_substitutions = {"128  # variant: BLOCK_N": "%d  # variant: BLOCK_N" % block_n},
            copts = ["-O3"],
            defines = ["CONSUMER_BLOCK_N=%d" % block_n, "CONSUMER_B_PARTS=2"],
        )
    fused_kernel(
        name = name,
        arch = "sm_90a",
        components = [scheduler, ":tma_loader", ":" + consumer, epilogue],
        kernel = kernel,
        visibility = ["//visibility:public"],
    )
    fused_kernel_sass_test(
        name = name + "_sass_test",
        kernel = ":" + name,
    )
