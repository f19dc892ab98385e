"""Host provider of attn_store's varlen build: the tensor map of o [tokens_q, heads, d] bf16 as
2-D [tokens_q, heads * d], stored in boxes of [64 rows, 64 cols] (one warpgroup's rows, a head's
128-byte column half) with SWIZZLE_128B."""


def provide(lent, facts, host):
    heads, tokens = lent["heads"], lent["tokens_q"]
    host.require(heads >= 1 and tokens >= 1, f"empty problem: heads = {heads}, tokens_q = {tokens}")
    return {"tmap_o": host.tensor_map_2d(lent["o"], "bf16", rows=tokens, cols=heads * facts["head_dim"], box_rows=64,
                                         box_cols=64, swizzle=128)}
