"""Host provider of attn_varlen_loader: tensor maps of q [tokens_q, heads * d] and k, v
[tokens_k, heads / kv_group * d] bf16 (FlashAttention's varlen layout read as 2-D), boxes of
[128 rows, 64 cols] at a head's columns, SWIZZLE_128B (attn.h), L2 promotion 256 B. Rows past
the tensor read as zero."""


def provide(lent, facts, host):
    d, blk = facts["head_dim"], facts["block_q"]
    heads, group, bh = lent["heads"], lent["kv_group"], lent["bh"]
    host.require(heads >= 1 and bh >= heads and bh % heads == 0, f"bh {bh} is not a whole number of {heads} heads")
    host.require(group >= 1 and heads % group == 0, f"kv_group {group} does not divide the {heads} query heads")
    host.require(lent["tokens_q"] >= 1 and lent["tokens_k"] >= 1,
                 f"empty problem: tokens_q={lent['tokens_q']}, tokens_k={lent['tokens_k']}")

    def tmap(name, rows, cols):
        return host.tensor_map_2d(lent[name], "bf16", rows=rows, cols=cols, box_rows=blk, box_cols=64, swizzle=128,
                                  l2_promotion=256)

    kv_cols = heads // group * d
    return {"tmap_q": tmap("q", lent["tokens_q"], heads * d), "tmap_k": tmap("k", lent["tokens_k"], kv_cols),
            "tmap_v": tmap("v", lent["tokens_k"], kv_cols)}
