"""Public API of the pipelink Bazel rules.

    load("@pipelink//pipelink_rules:defs.bzl", "cuda_component", "fused_kernel",
         "fused_kernel_sass_test")

See docs/ARCHITECTURE.md, "Bazel rules", for attributes, providers and actions.
"""

load("//pipelink_rules/private:arch.bzl", _SUPPORTED_ARCHS = "SUPPORTED_ARCHS")
load("//pipelink_rules/private:cuda_component.bzl", _cuda_component = "cuda_component")
load(
    "//pipelink_rules/private:fused_kernel.bzl",
    _fused_kernel = "fused_kernel",
    _fused_kernel_sass_test = "fused_kernel_sass_test",
)
load(
    "//pipelink_rules/private:providers.bzl",
    _CudaComponentInfo = "CudaComponentInfo",
    _FusedKernelInfo = "FusedKernelInfo",
    _PipelinkArchInfo = "PipelinkArchInfo",
)

cuda_component = _cuda_component
fused_kernel = _fused_kernel
fused_kernel_sass_test = _fused_kernel_sass_test
CudaComponentInfo = _CudaComponentInfo
FusedKernelInfo = _FusedKernelInfo
PipelinkArchInfo = _PipelinkArchInfo
SUPPORTED_ARCHS = _SUPPORTED_ARCHS
