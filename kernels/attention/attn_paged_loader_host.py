"""Host provider of attn_paged_loader: the tensor map of q as attn_loader's ([bh * q_len, D],
boxes of [128 rows, 64 cols]), and of the K and V page pools as 2-D [pool_rows, D] with boxes of
[page_size rows, 64 cols] (one page of one KV head), SWIZZLE_128B, L2 promotion 128 B (decode
reads each K/V byte once)."""


def provide(lent, facts, host):
    d, blk = facts["head_dim"], facts["block_q"]
    ps, rows = lent["page_size"], lent["pool_rows"]
    host.require(ps in (16, 32, 64, 128), f"page_size {ps}: the loader takes pages of 16, 32, 64 or 128 tokens")
    host.require(rows >= ps and rows % ps == 0, f"pool_rows {rows} is not a whole number of {ps}-token pages")
    host.require(lent["q_len"] >= 1 and lent["bh"] >= 1, f"empty problem: bh={lent['bh']}, q_len={lent['q_len']}")

    def tmap(name, n, box, promotion):
        return host.tensor_map_2d(lent[name], "bf16", rows=n, cols=d, box_rows=box, box_cols=64, swizzle=128,
                                  l2_promotion=promotion)

    return {"tmap_q": tmap("q", lent["bh"] * lent["q_len"], blk, 256), "tmap_k": tmap("k", rows, ps, 128),
            "tmap_v": tmap("v", rows, ps, 128)}
