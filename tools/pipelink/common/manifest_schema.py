"""The manifest's schema: what the linker writes and the runtime reads (the one interface between
the halves). The linker writes manifest.json as plain data (pipelink.linker.link.make_manifest);
the runtime reads it into typed data (pipelink.runtime.manifest.Manifest) and checks it against
these bounds."""

MANIFEST_FORMAT = 1  # the manifest.json format the linker writes and the runtime reads
PARAM_BLOCK_MAX = 32764  # bytes of kernel parameters CUDA 12.1+ passes (sm_70 and later)
DYNAMIC_SMEM_MAX = 232448  # the largest opt-in shared memory of a supported arch (sm_90a / sm_100a)

# Grid names the runtime supplies from the device: its SM count, and how many CTAs of this
# kernel (whole clusters) can be resident at once, for persistent grids whose CTAs wait on
# each other ("min(resident_ctas, tiles)").
BUILTIN_GRID_NAMES = ("num_sms", "resident_ctas")
