"""Host provider of attn_loader: tensor maps of q, k, v as 2-D [(B*H*S), 128] bf16, boxes of
[128 rows, 64 cols], SWIZZLE_128B (attn.h). Rows past the tensor read as zero."""


def provide(lent, facts, host):
    d, blk = facts["head_dim"], facts["block_q"]
    bh, q_len, kv_len = lent["bh"], lent["q_len"], lent["kv_len"]
    host.require(q_len >= 1 and kv_len >= 1 and bh >= 1, f"empty problem: bh={bh}, q_len={q_len}, kv_len={kv_len}")

    def tmap(name, rows):
        return host.tensor_map_2d(lent[name], "bf16", rows=rows, cols=d, box_rows=blk, box_cols=64, swizzle=128)

    return {"tmap_q": tmap("q", bh * q_len), "tmap_k": tmap("k", bh * kv_len), "tmap_v": tmap("v", bh * kv_len)}
