"""Providers shared by the pipelink Bazel rules.

This file is shared: the toolchain part (CudaToolchainInfo) and the rules part
(CudaComponentInfo, FusedKernelInfo) are kept by different people. Add a provider; do not
rewrite someone else's.
"""

CudaToolchainInfo = provider(
    doc = "The CUDA toolkit a pipelink build compiles, links and disassembles with.",
    fields = {
        "nvcc": "File: the nvcc driver (bin/nvcc).",
        "nvcc_wrapper": "File: runs nvcc from a fixed directory so outputs are bit-identical across output bases (see cuda_compile_action).",
        "nvcc_files": "depset of File: everything nvcc needs to run (bin/, nvvm/, include/, lib/).",
        "cuobjdump": "File: bin/cuobjdump.",
        "nvdisasm": "File: bin/nvdisasm.",
        "nvjitlink": "File: the nvJitLink shared library (lib/libnvJitLink.so*).",
        "cuda_home": "string: the toolkit root as actions see it, execroot-relative (external/...).",
        "host_compiler": "string: absolute path of a g++ <= 15 that nvcc accepts (-ccbin).",
        "cutlass_includes": "depset of File: the CUTLASS/CuTe headers (empty if no CUTLASS was found).",
        "cutlass_include_dir": "string: execroot-relative directory to pass as -I for CUTLASS ('' if none).",
        "version": "string: the toolkit's major.minor version, e.g. \"13.0\".",
        "copts": "list of string: nvcc flags every compile with this toolkit + host compiler needs (cuda_compile_action adds them first).",
    },
)

# ---- rules part (issue 4: cuda_component / fused_kernel) ------------------------------

PipelinkArchInfo = provider(
    doc = "The value of the //pipelink_rules:arch build setting (the GPU architecture that " +
          "cuda_component compiles for in the current configuration).",
    fields = {
        "arch": "string: an architecture such as \"sm_90a\", \"sm_100a\" or \"sm_120a\".",
    },
)

CudaComponentInfo = provider(
    doc = "A packed pipelink component: what `cuda_component` hands to `fused_kernel`.",
    fields = {
        "package": "File: the packed component (<name>.plpkg), output of `pipelink pack`.",
        "component": "string: the package name the kernel file refers to (the contract's " +
                     "component.name; the rule's `component` attribute, default the target name).",
        "contract": "File: the component's contract (.contract.toml).",
        "packed_contract": "File: the contract as packed (the same file, or for an arch other " +
                           "than sm_90a until `pack --arch` exists, a copy with component.arch " +
                           "rewritten); diagnostics cite this path.",
        "objects": "depset of File: the LTO-IR objects (one per .cu source).",
        "sources": "depset of File: the .cu sources (carried for the control build).",
        "headers": "depset of File: every header a source may include: own hdrs, deps' headers, " +
                   "pipelink.h and, if used, the toolchain's CUTLASS headers.",
        "copts": "list of string: the -I/-D/extra options the sources were compiled with " +
                 "(execroot-relative), as recorded in the package for the control build.",
        "arch": "string: the architecture the objects were compiled for (e.g. \"sm_90a\").",
        "label": "Label: the cuda_component target (for diagnostics).",
    },
)

FusedKernelInfo = provider(
    doc = "A linked fused kernel: what `fused_kernel` produced.",
    fields = {
        "name": "string: the kernel name (the target name).",
        "cubin": "File: <name>.cubin, the linked kernel.",
        "manifest": "File: <name>.manifest.json (launch facts: grid, block, smem, params).",
        "report": "File: <name>.report.json (the placement the linker solved).",
        "map": "File: <name>.map.txt (human-readable placement map).",
        "control_cubin": "File: <name>.control.cubin, the same kernel built as one translation " +
                         "unit (output group `control`; only built when requested).",
        "kernel": "File: the .kernel.toml composition file.",
        "packages": "depset of File: the component packages that were linked.",
        "arch": "string: the architecture the kernel was linked for.",
    },
)
