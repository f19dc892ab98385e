"""Attention variants: one variant package (built as package `attn_mask`) linked with the
unchanged loader, core and an epilogue into its own fused_kernel target, plus its SASS test
against the single-unit control.

    attention_variant(name = "attn_causal", src = "attn_causal.cu")
"""

load("//pipelink_rules:defs.bzl", "cuda_component", "fused_kernel", "fused_kernel_sass_test")

def attention_variant(name, src, epilogue = ":attn_store", kernel = "attn_prefill.kernel.toml"):
    mask = name + "_mask"
    cuda_component(
        name = mask,
        component = "attn_mask",
        srcs = [src],
        hdrs = ["attn.h", "attn_variant.h"],
        contract = "attn_mask.contract.toml",
        copts = ["-O3"],
    )
    fused_kernel(
        name = name,
        arch = "sm_90a",
        components = [":attn_loader", ":attn_core", ":" + mask, epilogue],
        kernel = kernel,
        visibility = ["//visibility:public"],
    )
    fused_kernel_sass_test(
        name = name + "_sass_test",
        kernel = ":" + name,
    )
