"""benchmarks/llama_decode_timeline.py's reading of the trace build's stamps (CPU, synthetic
stamps laid out as dec_step.cu's DEC_TRACE writes them): spans, latencies and the timer's wrap."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT

np = pytest.importorskip("numpy")
sys.path.insert(0, str(ROOT / "benchmarks"))
import llama_decode_timeline as tl  # noqa: E402

LAYERS, GRID = 2, 4
OPS = 2 + 5 * LAYERS


def stamps(start: int, gap_ns: int = 400, attention_ns: int = 5000):
    """Every matvec op: CTA c waits from t, goes on at t + 1000 + 10 c, has its input at + 2000 + 10 c,
    is done at + 5000 + 100 c; the next op begins gap_ns after the last CTA is done."""
    s = np.zeros((OPS, GRID, tl.TRACE_WORDS), dtype=np.int64)
    t = start
    for k in range(1, OPS):
        if tl.op_kind(k, LAYERS)[0] == "ATTN":  # the step does not stamp the attention op
            t += attention_ns
            continue
        for c in range(GRID):
            s[k, c] = [t, t + 1000 + 10 * c, t + 2000 + 10 * c, t + 5000 + 100 * c, 300, 3, 0, 0]
        t += 5000 + 100 * (GRID - 1) + gap_ns
    return s % (1 << 32)


def test_op_kinds_follow_dec_h():
    kinds = [tl.op_kind(k, LAYERS)[0] for k in range(OPS)]
    assert kinds == ["EMBED", "QKV", "ATTN", "O", "GU", "DOWN", "QKV", "ATTN", "O", "GU", "DOWN", "HEAD"]


def test_spans_latencies_and_phases():
    r = tl.analyse(stamps(10_000), LAYERS)
    gu = r["GU"]
    assert gu["input"] == pytest.approx(1.0) and gu["stream_wait"] == pytest.approx(0.3)
    assert gu["tiles"] == pytest.approx(3.135) and gu["tiles_max"] == pytest.approx(3.27)
    assert gu["span"] == pytest.approx(5.7)  # 5.3 of the op + the 0.4 gap
    assert gu["skew"] == pytest.approx(0.15)  # the last CTA's done minus the median CTA's
    assert gu["latency"] == pytest.approx(0.4 + 1.015)  # went (median CTA) - the previous op's last done
    assert r["O"]["span"] == pytest.approx(5.7 + 5.0)  # the O op's span holds the attention op
    assert r["total"] == pytest.approx(8 * 5.7 + 2 * 5.0 + 5.3)  # the first QKV's wait to the HEAD's last done


def test_the_timers_wrap_is_undone():
    """The stamps are the timer's low 32 bits: a run across the wrap reads as one that is not."""
    plain = tl.analyse(stamps(10_000), LAYERS)
    wrapped = tl.analyse(stamps((1 << 32) - 20_000), LAYERS)
    for kind in ("QKV", "O", "GU", "DOWN", "HEAD"):
        assert wrapped[kind] == pytest.approx(plain[kind])
    assert wrapped["total"] == pytest.approx(plain["total"])


def test_the_attention_window_taken_apart():
    """The attention role's records (layer-major after the step's): wake-up after the QKV op's last
    CTA, prologue, blocks, merge, release, and the handoff to the O op's median CTA."""
    step = stamps(10_000)
    attn = np.zeros((LAYERS, GRID, tl.TRACE_WORDS), dtype=np.int64)
    for layer in range(LAYERS):
        kq = 1 + 5 * layer
        qkv_done = int(step[kq, :, 3].max())
        for c in range(2):  # two CTAs have tasks (one chunk a head), the others none
            attn[layer, c] = [qkv_done - 100, qkv_done + 300, qkv_done + 800, qkv_done + 1800, qkv_done + 2000,
                              qkv_done + 2100 + 50 * c, 1, 1]
    r = tl.analyse(step, LAYERS, attn % (1 << 32))["ATTN"]
    assert r["tasks"] == 2 and r["chunks"] == 1
    assert r["wake"] == pytest.approx(0.3) and r["prologue"] == pytest.approx(0.5)
    assert r["blocks"] == pytest.approx(1.0) and r["merge"] == pytest.approx(0.2)
    assert r["release"] == pytest.approx(0.125)  # the median of 0.1 and 0.15
    # the O op's median CTA went on 5.0 (attention) + 0.4 (gap) + 1.015 after the QKV op's last done
    assert r["window"] == pytest.approx(6.415)
    assert r["handoff"] == pytest.approx(6.415 - 2.15)


def test_the_stamps_start_past_the_batchs_state_words():
    """dec.h trace_base: 16 words up to batch 4 (the batch-1 trace build's layout), 4 a sequence
    beyond, so a batch-8 trace build's stamps do not overwrite the sequences' tokens."""
    assert [tl.trace_base(b) for b in (1, 3, 4, 5, 8)] == [16, 16, 16, 20, 32]


def test_the_batch_is_read_from_the_builds_manifest(tmp_path):
    m = tmp_path / "b.manifest.json"
    m.write_text('{"facts": {"batch": 8}}')
    assert tl._manifest_batch(m) == 8
    m.write_text('{"facts": {}}')  # a build from before the fact
    assert tl._manifest_batch(m) == 1
    m.write_text("not json")  # MegakernelStep's manifest check reports it
    assert tl._manifest_batch(m) == 1
