"""Host provider of attn_store: the tensor map of o as 2-D [(B*H*q_len), d] bf16, stored in boxes
of [64 rows, 64 cols] (one warpgroup's rows, one 128-byte column half) with SWIZZLE_128B."""


def provide(lent, facts, host):
    bh, q_len = lent["bh"], lent["q_len"]
    host.require(q_len >= 1 and bh >= 1, f"empty problem: bh = {bh}, q_len = {q_len}")
    return {"tmap_o": host.tensor_map_2d(lent["o"], "bf16", rows=bh * q_len, cols=facts["head_dim"], box_rows=64,
                                         box_cols=64, swizzle=128)}
