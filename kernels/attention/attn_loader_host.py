"""Host provider of attn_loader: tensor maps of q, k, v as 2-D [(B*H*S), 128] bf16 (k and v have
B*H / kv_group heads), boxes of [128 rows, 64 cols], SWIZZLE_128B (attn.h), L2 promotion 256 B
(K/V of decode: 128 B). Rows past the tensor read as zero."""


def provide(lent, facts, host):
    d, blk = facts["head_dim"], facts["block_q"]
    bh, q_len, kv_len, group = lent["bh"], lent["q_len"], lent["kv_len"], lent["kv_group"]
    host.require(q_len >= 1 and kv_len >= 1 and bh >= 1, f"empty problem: bh={bh}, q_len={q_len}, kv_len={kv_len}")
    host.require(group >= 1 and bh % group == 0, f"kv_group {group} does not divide the {bh} query heads")

    # Decode (q_len < block_q: one Q tile per head) reads each K/V byte once: with L2 promotion of
    # 128 B, a box row's length, it streams 6-7% faster than with 256 B (B=8, KV=32K: 961 vs 1028
    # us on the H200). Prefill re-reads K/V through L2, where 256 B is faster (causal 32K: 8%).
    kv_promotion = 128 if q_len < blk else 256

    def tmap(name, rows, promotion=256):
        return host.tensor_map_2d(lent[name], "bf16", rows=rows, cols=d, box_rows=blk, box_cols=64, swizzle=128,
                                  l2_promotion=promotion)

    kv_rows = bh // group * kv_len  # k and v have bh / kv_group heads
    return {"tmap_q": tmap("q", bh * q_len), "tmap_k": tmap("k", kv_rows, kv_promotion),
            "tmap_v": tmap("v", kv_rows, kv_promotion)}
