"""Public entry points of the pipelink CUDA toolchain (issue 2).

    load("//pipelink_rules:cuda.bzl", "cuda_ltoir", "cuda_compile_action", "find_cuda_toolchain", "CUDA_TOOLCHAIN_TYPE")
"""

load("//pipelink_rules/private:cuda_compile.bzl", _cuda_compile_action = "cuda_compile_action", _cuda_ltoir = "cuda_ltoir")
load("//pipelink_rules/private:providers.bzl", _CudaToolchainInfo = "CudaToolchainInfo")
load("//pipelink_rules/private:toolchain.bzl", _CUDA_TOOLCHAIN_TYPE = "CUDA_TOOLCHAIN_TYPE", _find_cuda_toolchain = "find_cuda_toolchain")

CudaToolchainInfo = _CudaToolchainInfo
CUDA_TOOLCHAIN_TYPE = _CUDA_TOOLCHAIN_TYPE
cuda_compile_action = _cuda_compile_action
cuda_ltoir = _cuda_ltoir
find_cuda_toolchain = _find_cuda_toolchain
