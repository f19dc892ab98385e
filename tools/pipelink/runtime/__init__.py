"""The launch side of pipelink: a linked cubin and its manifest, launched with parameters by name.

    from pipelink.runtime import Kernel, LaunchError
    k = Kernel.load("out/toy.cubin")                 # manifest: out/toy.manifest.json
    k(x=..., tiles=64, blocks=132)                    # on torch's current stream

What this package offers callers:

  Kernel, load, Session     loading and launching (pipelink.runtime.kernel)
  LaunchError, RUNTIME_CODES  every failure, with one R-* code and a hint (launch_error)
  Manifest, Slot, default_manifest_path  the manifest read into typed data (manifest)
  plan_launch, LaunchPlan, coerce_params, pack_params, Packer, grid_dims
                            the pure planning of a launch, usable without a GPU (launch_plan)
  expect_tensor             the tensor checks of per-kernel wrappers (entry; the other argument
                            checks are in pipelink.runtime.entry)
  BUILTIN_GRID_NAMES        the grid names the runtime supplies (pipelink.common.manifest_schema)
  gpu_unavailable_reason    None where a CUDA GPU is usable here, else why not (device; no torch)

Peer buffers for several ranks are pipelink.runtime.peers (the exchange) and
pipelink.runtime.peers_cuda (the mappings); host providers and workspaces, which the manifest
names, are pipelink.runtime.host and pipelink.runtime.workspace; what Kernel checks before any
provider's Python runs (its binding, and whose code it is) is pipelink.runtime.host_trust. The linker never imports this
package: the two halves share only pipelink.common.
"""

from pipelink.common.manifest_schema import BUILTIN_GRID_NAMES
from pipelink.runtime.entry import expect_tensor
from pipelink.runtime.device import gpu_unavailable_reason
from pipelink.runtime.kernel import Kernel, Session, load
from pipelink.runtime.launch_error import RUNTIME_CODES, LaunchError
from pipelink.runtime.launch_plan import LaunchPlan, Packer, coerce_params, grid_dims, pack_params, plan_launch
from pipelink.runtime.manifest import Manifest, Slot, default_manifest_path

__all__ = [
    "Kernel", "load", "Session",
    "LaunchError", "RUNTIME_CODES",
    "Manifest", "Slot", "default_manifest_path",
    "plan_launch", "LaunchPlan", "coerce_params", "pack_params", "Packer", "grid_dims",
    "expect_tensor",
    "BUILTIN_GRID_NAMES",
    "gpu_unavailable_reason",
]
