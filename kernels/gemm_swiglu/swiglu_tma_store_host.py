"""Host provider of the TMA-store SwiGLU epilogue: the tensor map of `out` [m, n] bf16,
stored in boxes of [block_m, 64] with SWIZZLE_128B (see swiglu_tma_store.cu)."""


def provide(lent, facts, host):
    m, n = lent["m"], lent["n"]
    host.require(n % 8 == 0, f"n = {n} must be a multiple of 8 (TMA row strides are 16-byte multiples)")
    return {"tmap_out": host.tensor_map_2d(lent["out"], "bf16", rows=m, cols=n, box_rows=facts["block_m"],
                                           box_cols=64, swizzle=128)}
