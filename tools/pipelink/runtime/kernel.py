"""Run pass: load a linked cubin + its manifest and launch it with parameters by name.

    from pipelink.runtime import Kernel, LaunchError
    k = Kernel.load("out/toy.cubin")                 # manifest: out/toy.manifest.json
    k(x=..., tiles=64, blocks=132)                    # on torch's current stream
    k.launch(grid=(8, 1, 1), stream=s, **params)      # explicit grid / stream

The kernel takes ONE by-value parameter, `struct PlKernelParams`, whose fields the manifest
lists (instance, name, type, offset). A parameter name is one host value across the kernel:
it is written into every instance's field of that name. Values:

  ptr       a CUDA tensor (torch, or anything with `data_ptr()`/`is_cuda`; must be on the
            kernel's device and contiguous), an object with `__cuda_array_interface__`, or
            an int (a raw device pointer)
  u32/i32/u64  an int in the type's range (bool is refused)
  f32       an int or float representable as a float

The grid comes from the manifest's grid expressions over the scalar parameters, the facts,
and launch-only names (a grid name that is neither, e.g. the toy's `blocks`, is an extra
int the caller passes). A `/` in a grid expression must divide exactly, else R-SHAPE names
the parameter; `//` floors and `ceil_div(a, b)` rounds up, on purpose. An optional
manifest `requires` list holds expressions that must evaluate nonzero.

Everything up to the launch call is pure and runs without a GPU: the manifest
(`pipelink.runtime.manifest`), then `plan_launch`, `coerce_params`, `pack_params`, `grid_dims`
(`pipelink.runtime.launch_plan`); this module holds the CUDA part. Launching uses cuda.bindings' driver API directly
(module load, function attributes, cuLaunchKernel with `kernelParams` pointing at one
host buffer): no allocation, no synchronisation, so a launch can be captured into a CUDA
graph (`torch.cuda.graph`). Every CUDA return code is checked; every failure is a
`LaunchError` (a `Rejected` with one R-* diagnostic and a hint).

A manifest with host providers carries Python that planning runs: loading checks first that it is
bound to this cubin and is this workspace's code, or that the caller opted in
(`trust_host_code=`; pipelink.runtime.host_trust), else R-HOST before anything runs.
"""

from __future__ import annotations

import ctypes
import math
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping

from pipelink.common.files import display, read_regular, why_unreadable
from pipelink.runtime.host import HostEncoder, run_providers
from pipelink.runtime.host_trust import TrustHostCode, check_host_code
from pipelink.runtime.launch_error import LaunchError
from pipelink.runtime.launch_plan import (
    LaunchPlan, Packer, Validator, coerce_params, grid_dims, lent_workspaces, plan_launch, signature_text,
    workspace_pointers)
from pipelink.runtime.launch_values import explicit_grid, stream_handle
from pipelink.runtime.manifest import Manifest, default_manifest_path, input_path
from pipelink.runtime.workspace import Arena, Workspace


# --------------------------------------------------------------------------------------
# CUDA driver
# --------------------------------------------------------------------------------------


def _driver():
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise LaunchError("R-CUDA", f"cuda.bindings is not importable ({e})",
                          hint="pip install 'cuda-bindings>=13,<14' (the CUDA Python driver bindings)") from None
    return driver


def _check(drv, res, what: str, *, code: str = "R-CUDA", hint: str = ""):
    """cuda.bindings returns (err, *values): raise on err, return the values."""
    err = res[0] if isinstance(res, tuple) else res
    if err != drv.CUresult.CUDA_SUCCESS:
        try:
            _, name = drv.cuGetErrorName(err)
            _, desc = drv.cuGetErrorString(err)
            text = f"{name.decode()}: {desc.decode()}"
        except Exception:  # noqa: BLE001 - the name is a nicety
            text = str(err)
        E = drv.CUresult
        if not hint:
            hint = {
                E.CUDA_ERROR_NO_DEVICE: "no GPU is visible (CUDA_VISIBLE_DEVICES?)",
                E.CUDA_ERROR_NO_BINARY_FOR_GPU: "the cubin was built for another architecture than this GPU",
                E.CUDA_ERROR_INVALID_IMAGE: "the file is not a cubin for this driver",
                E.CUDA_ERROR_UNSUPPORTED_PTX_VERSION: "the driver is older than the toolkit that built the cubin",
                E.CUDA_ERROR_OUT_OF_RESOURCES: "too many registers or threads for this launch",
                E.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: "launch on the capturing stream, not the legacy default stream",
                E.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: "this call is not allowed during stream capture",
                E.CUDA_ERROR_INVALID_HANDLE: "the stream belongs to another device or context",
                E.CUDA_ERROR_ILLEGAL_ADDRESS: "an earlier kernel faulted; the context is unusable (run under "
                                              "compute-sanitizer to find it)",
            }.get(err, "the driver's error is quoted above (cuda.bindings' CUresult)")
        raise LaunchError(code, f"{what} failed: {text}", hint=hint)
    if isinstance(res, tuple):
        return res[1] if len(res) == 2 else res[1:]
    return None


def _arch_ok(arch: str, cc: tuple[int, int]) -> bool:
    """Can SASS for `arch` run on a device of compute capability `cc`?"""
    num = arch[3:] if arch.startswith("sm_") else ""
    digits = num.rstrip("af")
    if not digits.isdigit():
        return True  # unknown spelling: let the driver decide
    want = (int(digits) // 10, int(digits) % 10)
    if num.endswith("a"):  # architecture-specific features (wgmma, setmaxnreg): that chip only
        return cc == want
    return cc[0] == want[0] and cc[1] >= want[1]


class Kernel:
    """A linked kernel loaded on one GPU. Launch with `kernel(**params)` or `kernel.launch(...)`."""

    def __init__(self, manifest: Manifest, cubin: bytes, device: int = 0, *,
                 validate: Validator | Iterable[Validator] | None = None, name: str = "",
                 trust_host_code: TrustHostCode = False, cubin_path: str | Path | None = None):
        """`trust_host_code`: run the manifest's host providers (Python) even when they are not
        this workspace's own (True, or the binding digests to trust); see runtime/host_trust.py.
        `cubin_path`: where the cubin was read (a control cubin is bound through its linked cubin)."""
        # Before the driver and before anything else: a refused provider never runs.
        check_host_code(manifest, cubin, trust_host_code=trust_host_code, cubin_path=cubin_path)
        self.manifest = manifest
        self.device = int(device)
        self.name = name or manifest.kernel
        self.validators: list[Validator] = ([] if validate is None else
                                            [validate] if callable(validate) else list(validate))
        self._packer = Packer(manifest)
        self._grid_cache: dict[tuple, tuple[int, int, int]] = {}
        self._module = None
        self._arena: Arena | None = None
        drv = self._drv = _driver()
        m = manifest
        try:
            res = drv.cuInit(0)
        except Exception as e:  # noqa: BLE001 - cuda.pathfinder raises when libcuda.so is absent
            raise LaunchError("R-DEVICE", f"no NVIDIA driver: {e}",
                              hint="run on a machine with a GPU and its driver (libcuda.so)") from None
        _check(drv, res, "cuInit", code="R-DEVICE", hint="no usable NVIDIA driver or GPU here")
        count = _check(drv, drv.cuDeviceGetCount(), "cuDeviceGetCount", code="R-DEVICE")
        if not 0 <= self.device < count:
            raise LaunchError("R-DEVICE", f"device {self.device} does not exist ({count} GPU(s) visible)",
                              hint="check CUDA_VISIBLE_DEVICES and the device= argument")
        dev = self._dev = _check(drv, drv.cuDeviceGet(self.device), "cuDeviceGet", code="R-DEVICE")
        A = drv.CUdevice_attribute
        attr = lambda a: _check(drv, drv.cuDeviceGetAttribute(a, dev), "cuDeviceGetAttribute")  # noqa: E731
        cc = (attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
        self.compute_capability = cc
        self.num_sms = attr(A.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self._host = HostEncoder(drv)
        if m.arch and not _arch_ok(m.arch, cc):
            raise LaunchError("R-DEVICE", f"kernel {m.kernel} is built for {m.arch}; device {self.device} is "
                              f"sm_{cc[0]}{cc[1]}", hint=f"relink with --arch sm_{cc[0]}{cc[1]}"
                              f"{'a' if cc[0] >= 9 else ''} or run on a matching GPU")
        self._ctx = _check(drv, drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain", code="R-DEVICE")
        self._ctx_int = int(self._ctx)
        with self._context():
            self._module = _check(drv, drv.cuModuleLoadData(cubin), f"loading the cubin of {self.name}")
            self._func = _check(drv, drv.cuModuleGetFunction(self._module, m.kernel.encode()),
                                f"finding entry {m.kernel!r} in the cubin", code="R-MANIFEST",
                                hint="the manifest belongs to another cubin: keep the pair from one link")
            F = drv.CUfunction_attribute
            fattr = lambda a: _check(drv, drv.cuFuncGetAttribute(a, self._func), "cuFuncGetAttribute")  # noqa: E731
            self.registers = fattr(F.CU_FUNC_ATTRIBUTE_NUM_REGS)
            self.static_smem = fattr(F.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
            max_threads = fattr(F.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
            if m.threads > max_threads:
                raise LaunchError("R-MANIFEST", f"block {list(m.block)} has {m.threads} threads; the cubin's "
                                  f"{m.kernel} allows at most {max_threads}",
                                  hint="the manifest belongs to another cubin: keep the pair from one link")
            self._check_param_size()
            optin = attr(A.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            if m.dynamic_smem + self.static_smem > optin:
                raise LaunchError("R-DEVICE", f"{m.kernel} needs {m.dynamic_smem} B dynamic + {self.static_smem} B "
                                  f"static shared memory; device {self.device} allows {optin} B per block",
                                  hint="relink for this GPU (the solver sizes rings to the SM's capacity)")
            _check(drv, drv.cuFuncSetAttribute(self._func, F.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                               m.dynamic_smem), "setting the dynamic shared memory limit")
            if math.prod(m.cluster) > 8:
                _check(drv, drv.cuFuncSetAttribute(self._func, F.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                                                   1), "allowing a non-portable cluster size")
            self.resident_ctas = self._resident_ctas()

    def _resident_ctas(self) -> int:
        """CTAs of this kernel that fit on the device at once (whole clusters)."""
        drv, m = self._drv, self.manifest
        if m.cluster == (1, 1, 1):
            per_sm = _check(drv, drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(self._func, m.threads, m.dynamic_smem),
                            "asking the occupancy of the kernel")
            return int(per_sm) * self.num_sms
        size = math.prod(m.cluster)
        cfg = self._launch_config((size, 1, 1), 0)
        n = _check(drv, drv.cuOccupancyMaxActiveClusters(self._func, cfg), "asking how many clusters fit")
        return int(n) * size

    # ---- loading -------------------------------------------------------------------------

    @classmethod
    def load(cls, cubin_path: str | Path, manifest_path: str | Path | None = None, device: int = 0, *,
             validate: Validator | Iterable[Validator] | None = None, trust_host_code: TrustHostCode = False) -> "Kernel":
        cp = input_path(cubin_path, "cubin_path")
        try:
            cubin = read_regular(cp)
        except (OSError, ValueError) as e:
            raise LaunchError("R-MANIFEST", f"cannot read cubin {display(cp)}: {why_unreadable(e)}",
                              hint="`pipelink link --out-dir DIR` writes DIR/<kernel>.cubin") from None
        manifest = Manifest.from_file(default_manifest_path(cp) if manifest_path is None else manifest_path)
        return cls(manifest, cubin, device, validate=validate, name=cp.name, trust_host_code=trust_host_code,
                   cubin_path=cp)

    def _check_param_size(self) -> None:
        drv, m = self._drv, self.manifest
        get = getattr(drv, "cuFuncGetParamInfo", None)
        if get is None:
            return
        # (Only index 0: probing a parameter that does not exist returns an error that
        # compute-sanitizer counts as an API error.)
        res = get(self._func, 0)
        if res[0] != drv.CUresult.CUDA_SUCCESS:
            return  # older driver: nothing to compare
        size = res[2]
        if size != (m.param_size or 4):
            raise LaunchError("R-MANIFEST", f"the cubin's {m.kernel} takes a {size}-byte parameter block; the "
                              f"manifest lays out {m.param_size} bytes",
                              hint="the manifest belongs to another cubin: keep the pair from one link")

    def close(self) -> None:
        drv = self._drv
        if self._module is not None:
            with self._context():
                if self._arena is not None:
                    _check(drv, drv.cuCtxSynchronize(), "waiting for launches before freeing workspaces")
                    self._arena.close()
                _check(drv, drv.cuModuleUnload(self._module), "cuModuleUnload")
            self._module = None
            _check(drv, drv.cuDevicePrimaryCtxRelease(self._dev), "cuDevicePrimaryCtxRelease")

    def __del__(self):  # best effort; interpreter shutdown may have torn the driver down
        try:
            if getattr(self, "_module", None) is not None and not sys.is_finalizing():
                self.close()
        except Exception:  # noqa: BLE001
            pass

    def __repr__(self) -> str:
        m = self.manifest
        return (f"Kernel({self.name}: {m.kernel} on cuda:{self.device}, block {list(m.block)}, "
                f"{m.dynamic_smem} B dynamic smem, params({signature_text(m)}), grid {list(m.grid)})")

    class _Ctx:
        __slots__ = ("k", "pushed")

        def __init__(self, k):
            self.k, self.pushed = k, False

        def __enter__(self):
            drv = self.k._drv
            cur = drv.cuCtxGetCurrent()
            if cur[0] != drv.CUresult.CUDA_SUCCESS or int(cur[1]) != self.k._ctx_int:
                _check(drv, drv.cuCtxPushCurrent(self.k._ctx), "cuCtxPushCurrent")
                self.pushed = True

        def __exit__(self, *exc):
            if self.pushed:
                _check(self.k._drv, self.k._drv.cuCtxPopCurrent(), "cuCtxPopCurrent")
            return False

    def _context(self) -> "_Ctx":
        return Kernel._Ctx(self)

    # ---- launching -----------------------------------------------------------------------

    def add_validator(self, fn: Validator) -> Validator:
        """Register `fn(kernel, params)`, called with the raw parameters before each launch."""
        self.validators.append(fn)
        return fn

    def plan(self, params: Mapping[str, Any], grid=None, workspaces=None) -> LaunchPlan:
        """Validate and pack without launching (what `launch` would do). `workspaces` lends
        caller buffers for workspaces: {name: (device pointer, bytes) or a CUDA tensor}, the
        name of a kernel-scope workspace or "<instance>.<name>" (R-WORKSPACE when unknown, too
        small for this launch or misaligned). A lent buffer of a `zero = true` workspace must be
        zero before its first launch; the kernel's protocol keeps it from then on."""
        m = self.manifest
        values = coerce_params(m, params, self.device, need_grid_names=grid is None)
        for v in self.validators:
            v(self, params)
        key = (tuple(sorted((k, v) for k, v in values.items() if m.param_types.get(k) != "ptr")),
               None if grid is None else tuple(explicit_grid(grid)))
        dims = self._grid_cache.get(key)
        if dims is None:
            dims = grid_dims(m, {**values, "num_sms": self.num_sms, "resident_ctas": self.resident_ctas}, grid)
            if len(self._grid_cache) < 4096:
                self._grid_cache[key] = dims
        if m.host or m.workspaces:
            with self._context():
                if m.host:
                    values = {**values, **run_providers(m.host, values, m.facts, self._host)}
                if m.workspaces:
                    values = {**values, **workspace_pointers(m, values, dims, self._workspace, workspaces,
                                                             self.device)}
        elif workspaces:
            lent_workspaces(m, workspaces, self.device)
        return LaunchPlan(dims, m.block, m.cluster, m.dynamic_smem, self._packer.pack(values), values)

    def _workspace(self, w: Workspace, nbytes: int) -> int:
        if self._arena is None:
            drv = self._drv
            self._arena = Arena(
                lambda n: int(_check(drv, drv.cuMemAlloc(n), f"allocating {n} B of workspace")),
                lambda p: _check(drv, drv.cuMemFree(p), "freeing a workspace"),
                lambda p, n: _check(drv, drv.cuMemsetD8(p, 0, n), "zeroing a workspace"))
        return self._arena.pointer(w, nbytes)

    def workspace_buffers(self) -> dict[str, tuple[int, int]]:
        """{name: (device pointer, bytes)} of the workspace buffers this kernel's launches got so
        far, named as `workspaces=` takes them: lend them to another kernel with the same
        workspaces (a benchmark timing two builds on the same buffers, in both orders)."""
        if self._arena is None:
            return {}
        names = {w.key: w.lend_name for w in self.manifest.workspaces}
        return {names[k]: buf for k, buf in self._arena.live().items() if k in names}

    def open(self, grid=None, workspaces=None, **params) -> "Session":
        """Plan once (validation, grid, host providers) and keep the packed parameters:
        `session.launch()` then does no host work but the launch call, so a session can be
        captured in a CUDA graph and replayed. The lent buffers (parameters and `workspaces`,
        see `plan`) must outlive the session."""
        return Session(self, self.plan(params, grid, workspaces))

    def __call__(self, stream=None, **params) -> LaunchPlan:
        return self.launch_with(params, stream=stream)

    def launch(self, grid=None, stream=None, **params) -> LaunchPlan:
        return self.launch_with(params, grid=grid, stream=stream)

    def launch_with(self, params: Mapping[str, Any], *, grid=None, stream=None, workspaces=None) -> LaunchPlan:
        """Launch with parameters from a dict (for parameter names like `grid` or `stream`)."""
        if self._module is None:
            raise LaunchError("R-CUDA", f"kernel {self.name} was closed", hint="load it again")
        return self._launch_plan(self.plan(params, grid, workspaces), stream)

    def _launch_plan(self, p: LaunchPlan, stream) -> LaunchPlan:
        if self._module is None:
            raise LaunchError("R-CUDA", f"kernel {self.name} was closed", hint="load it again")
        h = self._stream_handle(stream)
        drv, m = self._drv, self.manifest
        buf = ctypes.create_string_buffer(p.params, len(p.params))
        argv = (ctypes.c_void_p * 1)(ctypes.addressof(buf))
        gx, gy, gz = p.grid
        bx, by, bz = m.block
        with self._context():
            if m.cluster == (1, 1, 1):
                res = drv.cuLaunchKernel(self._func, gx, gy, gz, bx, by, bz, m.dynamic_smem, h,
                                         ctypes.addressof(argv), 0)
            else:
                res = drv.cuLaunchKernelEx(self._launch_config(p.grid, h), self._func, ctypes.addressof(argv), 0)
        _check(drv, res, f"launching {self.name} (grid {list(p.grid)}, block {list(m.block)}, "
                         f"{m.dynamic_smem} B dynamic smem)")
        return p

    def _launch_config(self, grid, stream: int):
        drv, m = self._drv, self.manifest
        cfg = drv.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = m.block
        cfg.sharedMemBytes = m.dynamic_smem
        cfg.hStream = drv.CUstream(stream)
        a = drv.CUlaunchAttribute()
        a.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = m.cluster
        cfg.attrs = [a]
        cfg.numAttrs = 1
        return cfg

    def _stream_handle(self, stream) -> int:
        if stream is None:
            torch = sys.modules.get("torch")  # torch's current stream (the capturing one under
            if torch is not None and torch.cuda.is_initialized():  # torch.cuda.graph); else the default
                return int(torch.cuda.current_stream(self.device).cuda_stream)
            return 0
        return stream_handle(stream, self.device)


def load(cubin_path: str | Path, manifest_path: str | Path | None = None, device: int = 0, **kw) -> Kernel:
    return Kernel.load(cubin_path, manifest_path, device, **kw)


class Session:
    """A planned launch of one kernel with fixed parameters (`Kernel.open`)."""

    def __init__(self, kernel: Kernel, plan: LaunchPlan):
        self.kernel, self.plan = kernel, plan

    def launch(self, stream=None) -> LaunchPlan:
        return self.kernel._launch_plan(self.plan, stream)

    __call__ = launch
