"""Host provider of attn_cp_loader: tensor maps of this rank's q as [(BH * q_len), 128] and of the
symmetric K/V window as [(world * stride_rows), 128] bf16 rows, boxes [128, 64], SWIZZLE_128B."""


def provide(lent, facts, host):
    d, blk = facts["head_dim"], facts["block_q"]
    bh, q_len, kv_len = lent["bh"], lent["q_len"], lent["kv_len"]
    world, rank, stride, flags_row = lent["world"], lent["rank"], lent["stride_rows"], lent["flags_row"]
    host.require(q_len >= 1 and kv_len >= 1 and bh >= 1, f"empty problem: bh={bh}, q_len={q_len}, kv_len={kv_len}")
    host.require(1 <= world <= 64 and rank < world, f"rank {rank} of world {world}: out of range")
    host.require(kv_len % (2 * blk) == 0, f"kv_len {kv_len} is not two whole chunks of {blk}-row blocks")
    host.require(flags_row >= 2 * bh * kv_len and stride > flags_row,
                 f"a region of {stride} rows cannot hold K, V ({2 * bh * kv_len} rows) and the flags at row {flags_row}")
    host.require(world * stride < 2**31, "the K/V window has more than 2^31 rows (TMA coordinates)")
    return {
        "tmap_q": host.tensor_map_2d(lent["q"], "bf16", rows=bh * q_len, cols=d, box_rows=blk, box_cols=64, swizzle=128),
        "tmap_kv": host.tensor_map_2d(lent["kv"], "bf16", rows=world * stride, cols=d, box_rows=blk, box_cols=64,
                                      swizzle=128),
    }
