"""The decode megakernel's schedule protocol (kernels/decode/dec.h, dec_step.cu, dec_stream.cu,
dec_attn_*.cu) as a model on the CPU: every CTA's three roles as coroutines that wait exactly
where the kernel waits (a free ring stage, a full one, an op's counter), run in random
interleavings over many seeds, grid sizes, ring depths, attention packages and positions, fused
and unfused (one launch per op). Checked: no interleaving deadlocks; the step consumes exactly the
tiles the stream loaded, in order; every task of op k runs after every task of op k - 1 (in this
launch or an earlier one); every op runs all its tasks once; each launch leaves every counter zero
and the HEAD launch alone publishes the token and position, after every role that reads them. A model of the protocol, not of the code: the
kernel's own run is the GPU tests'."""

from __future__ import annotations

import random
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "kernels" / "decode"))
import llama_pack as lp  # noqa: E402

QKV, ATTN, O, GU, DOWN, HEAD = range(1, 7)


class Model:
    def __init__(self, hidden=512, layers=2, heads=8, kv_heads=2, head_dim=64, inter=1024, vocab=1024,
                 tile_elems=16384):
        self.hidden, self.layers, self.heads, self.kv_heads, self.head_dim = hidden, layers, heads, kv_heads, head_dim
        self.inter, self.vocab, self.tile_elems = inter, vocab, tile_elems
        self.ops = 2 + 5 * layers

    def tiles(self, kind):  # dec.h mat_op's tiles
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        k, rows = {QKV: (self.hidden, q + 2 * kv), O: (q, self.hidden), GU: (self.hidden, self.inter),
                   DOWN: (self.inter, self.hidden), HEAD: (self.hidden, self.vocab)}[kind]
        return rows // lp.tile_rows(k, self.tile_elems)

    def mat_ops(self):  # dec.h nth_mat_op / nth_mat_op_index: (op index, kind)
        for layer in range(self.layers):
            for kind, off in ((QKV, 0), (O, 2), (GU, 3), (DOWN, 4)):
                yield 1 + 5 * layer + off, kind
        yield 1 + 5 * self.layers, HEAD


def first_tile(cta, rot, grid):
    return (cta + grid - rot % grid) % grid


class Launch:
    def __init__(self, m, grid, depth, split, pos, rng_range, executed, need, rng):
        self.m, self.G, self.depth, self.split, self.pos = m, grid, depth, split, pos
        self.begin, self.end = rng_range
        self.executed, self.need, self.rng = executed, need, rng
        self.counter = [0] * m.ops
        self.finish, self.arr, self.published = 0, [0] * m.kv_heads, False
        self.rings = [[] for _ in range(grid)]

    def runs(self, k):
        return self.begin <= k < self.end

    def waits_for(self, k):
        return k >= self.begin

    def run_task(self, k):
        """A task of op k runs: op k - 1 must be complete (this launch or before)."""
        if k > 0:
            assert self.executed[k - 1] == self.need[k - 1], f"op {k} ran before op {k - 1} was complete"
        self.executed[k] += 1
        assert self.executed[k] <= self.need[k], f"op {k} ran more tasks than it has"

    def stream(self, cta):
        rot = 0
        for k, kind in self.m.mat_ops():
            tiles = self.m.tiles(kind)
            i = first_tile(cta, rot, self.G) if self.runs(k) else tiles
            while i < tiles:
                for h in range(2 if kind == GU else 1):  # dec.h loads_per_tile: GU's gate rows, then its up rows
                    yield lambda: len(self.rings[cta]) < self.depth
                    self.rings[cta].append((k, i, h))
                i += self.G
            rot += tiles

    def step(self, cta):
        m, G = self.m, self.G
        yield lambda: True  # the role starts at some point of the launch, then reads the token
        assert not self.published, "the token was published before a step role read it"
        if cta == 0 and self.runs(0):
            self.run_task(0)
            self.counter[0] += 1
        state = {"k": 1, "prev": 1, "rot": 0}

        def matvec_op(kind):
            k, tiles = state["k"], m.tiles(kind)
            first = first_tile(cta, state["rot"], G)
            if first < tiles and self.runs(k):
                if self.waits_for(k - 1):
                    need = state["prev"]
                    yield lambda: self.counter[k - 1] >= need
                mine = 0
                for i in range(first, tiles, G):
                    for h in range(2 if kind == GU else 1):
                        yield lambda: bool(self.rings[cta])
                        assert self.rings[cta].pop(0) == (k, i, h), "the step took a load the stream did not load there"
                    self.run_task(k)
                    mine += 1
                    yield lambda: True  # the next tile may run before another CTA's
                self.counter[k] += mine  # one release per op and CTA, after its last tile
            state["rot"] += tiles
            state["prev"], state["k"] = tiles, k + 1

        for _ in range(m.layers):
            yield from matvec_op(QKV)
            state["prev"], state["k"] = G, state["k"] + 1  # ATTN: every CTA's attention role counts once
            for kind in (O, GU, DOWN):
                yield from matvec_op(kind)
        yield from matvec_op(HEAD)
        for layer in range(m.layers):  # dec_step: a launch's last attention op is waited for before it ends
            ka = 2 + 5 * layer
            if self.runs(ka) and not self.runs(ka + 1):
                yield lambda ka=ka: self.counter[ka] >= G
        self.finish += 1
        if self.finish == G:  # the last CTA: publish (HEAD's launch) and zero every counter
            if self.runs(m.ops - 1):
                self.published = True
            self.counter = [0] * m.ops
            self.finish = 0

    def attention(self, cta):
        m, G = self.m, self.G
        yield lambda: True  # the role starts at some point of the launch, then reads the position
        if any(self.runs(2 + 5 * layer) for layer in range(m.layers)):
            assert not self.published, "the position was published before an attention role read it"
        ln = self.pos + 1
        if self.split:
            per_head = min(32, max(1, G // m.kv_heads))
            cs = ((ln + per_head - 1) // per_head + 63) // 64 * 64
            nch = (ln + cs - 1) // cs
            tasks = [(j // nch, j % nch) for j in range(cta, m.kv_heads * nch, G)]
        else:  # a grid smaller than kv_heads loops over the heads
            nch, tasks = 1, [(kvh, 0) for kvh in range(cta, m.kv_heads, G)]
        self.chunks = nch
        for layer in range(m.layers):
            kq = 1 + 5 * layer
            if not self.runs(kq + 1):
                continue
            if tasks and self.waits_for(kq):
                need = m.tiles(QKV)
                yield lambda: self.counter[kq] >= need
            for kvh, c in tasks:
                assert self.executed[kq] == self.need[kq], "attention ran before its QKV op was complete"
                self.head_tasks[(layer, kvh, c)] = self.head_tasks.get((layer, kvh, c), 0) + 1
                if nch > 1:
                    self.arr[kvh] += 1
                    yield lambda: True  # another CTA may arrive between the count and the merge
                    if self.arr[kvh] == nch:
                        self.arr[kvh] = 0
            self.executed[kq + 1] += 1
            self.counter[kq + 1] += 1

    def run(self):
        live = [g for cta in range(self.G) for g in (self.stream(cta), self.step(cta), self.attention(cta))]
        waits = {id(g): (lambda: True) for g in live}
        while live:
            ready = [g for g in live if waits[id(g)]()]
            assert ready, f"deadlock: {len(live)} roles wait (launch ops [{self.begin}, {self.end}))"
            g = self.rng.choice(ready)
            try:
                waits[id(g)] = next(g)
            except StopIteration:
                live.remove(g)
        assert all(not r for r in self.rings), "tiles loaded but never consumed"
        assert not any(self.counter) and not any(self.arr), "a launch left a counter set"


def run_step(m, grid, depth, split, pos, unfused, seed):
    rng = random.Random(seed)
    need = [1] + [0] * (m.ops - 1)
    for k, kind in m.mat_ops():
        need[k] = m.tiles(kind)
    for layer in range(m.layers):
        need[2 + 5 * layer] = grid
    executed = [0] * m.ops
    ranges = [(k, k + 1) for k in range(m.ops)] if unfused else [(0, m.ops)]
    published, head_tasks, chunks = 0, {}, 1
    for r in ranges:
        launch = Launch(m, grid, depth, split, pos, r, executed, need, rng)
        launch.head_tasks = head_tasks
        launch.run()
        published += launch.published
        chunks = getattr(launch, "chunks", chunks)
    assert executed == need and published == 1
    # every KV head's attention (each of its chunks) ran exactly once a layer
    assert head_tasks == {(layer, kvh, c): 1 for layer in range(m.layers) for kvh in range(m.kv_heads)
                          for c in range(chunks)}


@pytest.mark.parametrize("unfused", [False, True])
@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("grid,depth,pos", [(1, 2, 0), (3, 2, 130), (7, 3, 300), (16, 3, 1000), (132, 2, 70)])
def test_every_interleaving_completes_in_order(unfused, split, grid, depth, pos):
    for seed in range(4 if grid < 100 else 1):
        run_step(Model(), grid, depth, split, pos, unfused, seed)


@pytest.mark.parametrize("model", [Model(tile_elems=8192), Model(heads=16, kv_heads=1, vocab=4096),
                                   Model(hidden=2048, layers=1, heads=32, kv_heads=8, inter=8192, vocab=2048)])
def test_other_shapes_and_tile_sizes(model):
    for unfused in (False, True):
        run_step(model, 5, 3, True, 200, unfused, seed=1)


@pytest.mark.parametrize("split", [True, False])
def test_a_grid_smaller_than_the_kv_heads_runs_every_head(split):
    """8 KV heads on 3 CTAs: the simple attention loops over its CTA's heads (kv_head mod grid)."""
    model = Model(hidden=2048, layers=1, heads=32, kv_heads=8, inter=8192, vocab=2048)
    for unfused in (False, True):
        run_step(model, 3, 2, split, 100, unfused, seed=2)


def test_the_model_catches_a_step_that_skips_its_wait():
    """A step that did not wait for the previous op is caught (the model can fail)."""
    orig = Launch.waits_for
    try:
        Launch.waits_for = lambda self, k: False  # noqa: E731 - no role ever waits
        with pytest.raises(AssertionError):
            for seed in range(20):
                run_step(Model(), 4, 2, True, 100, False, seed)
    finally:
        Launch.waits_for = orig
