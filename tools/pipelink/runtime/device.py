"""Whether a CUDA GPU is usable here, by the driver API alone (no torch): the one check behind the
tests' `requires_gpu` marker and the GPU benchmarks' refusal (benchmarks/gpu_bench.require_gpu)."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=None)
def gpu_unavailable_reason(sm: int | None = None) -> str | None:
    """None when a GPU is usable (and, with `sm` such as 90, device 0 has that compute
    capability), else why not: cuInit failing, no device, no driver, another architecture."""
    try:
        from cuda.bindings import driver
    except Exception as e:  # noqa: BLE001 - any import problem means "no GPU here"
        return f"cuda.bindings.driver is not importable ({e.__class__.__name__}: {e})"
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return f"cuInit(0) failed: {err.name}"
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count == 0:
            return f"no CUDA device ({err.name}, count {count})"
        if sm is not None:
            attr = driver.CUdevice_attribute
            _, major = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0)
            _, minor = driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0)
            if major * 10 + minor != sm:
                return f"needs an sm_{sm} GPU (device 0 is sm_{major}{minor})"
    except Exception as e:  # noqa: BLE001 - the driver library itself is missing
        return f"cuInit(0) failed: {e.__class__.__name__}: {e}"
    return None
