"""Attention variants: one variant package (built as package `attn_mask`) linked with the
unchanged loader, core and an epilogue into its own fused_kernel target, plus its SASS test
against the single-unit control; with d64 (default) also `<name>_d64` and `<name>_d256`, the same
variant package linked with attn_core_d64 (head dim 64) and attn_core_d256 (head dim 256; with
the loader's build of one Q stage, so the 64 KB tiles fit). `defines` pick a build of a source
that holds several variants (attn_varlen.cu).

    attention_variant(name = "attn_causal", src = "attn_causal.cu")
"""

load("//pipelink_rules:defs.bzl", "cuda_component", "fused_kernel", "fused_kernel_sass_test")

# The loader's files: its builds below and its geometry mutations
# (experiments/symbol_link/attention_mutations.bzl).
LOADER_FILES = dict(
    srcs = ["attn_loader.cu"],
    hdrs = ["attn.h", "attn_producer.h"],
    contract = "attn_loader.contract.toml",
    host_provider = "attn_loader_host.py",
)

def attention_loader(name, contract_substitutions = {}):
    """The TMA loader package (attn_loader.cu, package `attn_loader`), its contract edited by
    `contract_substitutions` (e.g. another ring depth) when given."""
    cuda_component(
        name = name,
        component = "attn_loader",
        contract_substitutions = contract_substitutions,
        copts = ["-O3"],
        **LOADER_FILES
    )

# Each loader's build of one Q stage (ring q depth 1): the d = 256 kernels' loader.
_ONE_Q_STAGE = {
    ":attn_loader": ":attn_loader_q1",
    ":attn_paged_loader": ":attn_paged_loader_q1",
    ":attn_varlen_loader": ":attn_varlen_loader_q1",
}

# Each epilogue's build for head dim 256, where it has one.
_D256_EPILOGUE = {":attn_combine": ":attn_combine_d256"}

def attention_variant(name, src, epilogue = ":attn_store", kernel = "attn_prefill.kernel.toml", d64 = True, loader = ":attn_loader",
                      defines = []):
    mask = name + "_mask"
    cuda_component(
        name = mask,
        component = "attn_mask",
        srcs = [src],
        hdrs = ["attn.h", "attn_variant.h"],
        contract = "attn_mask.contract.toml",
        copts = ["-O3"],
        defines = defines,
    )
    fused_kernel(
        name = name,
        arch = "sm_90a",
        components = [loader, ":attn_core", ":" + mask, epilogue],
        kernel = kernel,
        visibility = ["//visibility:public"],
    )
    fused_kernel_sass_test(
        name = name + "_sass_test",
        kernel = ":" + name,
    )
    if d64:  # the same variant package with the d = 64 build of the core
        fused_kernel(
            name = name + "_d64",
            arch = "sm_90a",
            components = [loader, ":attn_core_d64", ":" + mask, epilogue],
            kernel = kernel,
            visibility = ["//visibility:public"],
        )
        fused_kernel_sass_test(
            name = name + "_d64_sass_test",
            kernel = ":" + name + "_d64",
        )
        fused_kernel(
            name = name + "_d256",
            arch = "sm_90a",
            components = [_ONE_Q_STAGE.get(loader, loader), ":attn_core_d256", ":" + mask, _D256_EPILOGUE.get(epilogue, epilogue)],
            kernel = kernel,
            visibility = ["//visibility:public"],
        )
        fused_kernel_sass_test(
            name = name + "_d256_sass_test",
            kernel = ":" + name + "_d256",
        )
