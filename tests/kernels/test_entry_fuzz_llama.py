"""Property-based fuzz of the Llama entries (kernels/decode: config_from_hf, load_safetensors,
Llama.from_config, generate) with malformed inputs: damaged config.json dicts and files, damaged
safetensors checkpoints, and generate() arguments of every wrong type and range. On every input
the entry returns or raises a LaunchError with an R-* code and a hint (helpers.entry_fuzz), and
an input it accepts must be one an independent oracle calls valid. CPU only, seeded."""

from __future__ import annotations

import json
import math
import struct
import sys

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
safetensors_torch = pytest.importorskip("safetensors.torch")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from conftest import ROOT  # noqa: E402
from helpers.entry_fuzz import REFUSED, fuzz_settings, outcome  # noqa: E402

sys.path.insert(0, str(ROOT / "kernels" / "decode"))
import llama_models as lm  # noqa: E402
from llama import Llama  # noqa: E402
from llama_weights import load_safetensors, random_weights  # noqa: E402

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.filterwarnings("ignore:.*(nested|Sparse CSR) tensor")]

VOCAB, MAX_POS = 64, 40
TINY = lm.LlamaConfig("tiny", VOCAB, 32, 1, 4, 2, 8, 48, 1e-5, 10000.0, None, True, MAX_POS)
BASE = {"model_type": "llama", "vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 48, "max_position_embeddings": MAX_POS,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
        "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32}}
FIELDS = sorted(set(BASE) | {"head_dim", "hidden_act", "attention_bias", "mlp_bias", "pretraining_tp",
                             "partial_rotary_factor", "use_sliding_window", "rope_parameters"})
SCALING = ["factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", "rope_type"]
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 9), st.floats(allow_nan=True, allow_infinity=True),
                 st.sampled_from([0, -1, 3, 2**31, 2**63, 10**400, "llama", "qwen3", "silu", "", "7"]),
                 st.lists(st.integers(0, 4), max_size=2), st.dictionaries(st.sampled_from(["a", "type"]), st.integers(),
                                                                          max_size=1))


def _damaged_config(draw_muts, drops, scaling_muts, model_type):
    cfg = {**BASE, "model_type": model_type, "rope_scaling": dict(BASE["rope_scaling"])}
    for k in drops:
        cfg.pop(k, None)
    cfg.update(draw_muts)
    if isinstance(cfg.get("rope_scaling"), dict):
        cfg["rope_scaling"].update(scaling_muts)
    return cfg


def _valid_config(c: lm.LlamaConfig) -> bool:
    ints = [c.vocab, c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim, c.inter, c.max_positions]
    return (all(type(v) is int and 1 <= v <= 2**31 - 1 for v in ints) and c.heads % c.kv_heads == 0
            and c.head_dim % 2 == 0 and all(math.isfinite(v) and v > 0 for v in (c.rms_eps, c.rope_theta)))


def test_fuzz_config_dicts_and_files(tmp_path):
    """Missing fields, wrong types, zero / negative / 2^63 / NaN / inf values, inconsistent head
    counts, unknown model types and rope_scaling junk, as a dict and as a config.json file."""
    path = tmp_path / "config.json"

    @fuzz_settings(300)
    @given(st.sampled_from(["llama", "qwen3"]), st.dictionaries(st.sampled_from(FIELDS), JUNK, max_size=3),
           st.lists(st.sampled_from(FIELDS), max_size=2), st.dictionaries(st.sampled_from(SCALING), JUNK, max_size=2),
           st.booleans())
    def run(model_type, muts, drops, scaling_muts, as_file):
        cfg = _damaged_config(muts, drops, scaling_muts, model_type)
        if as_file:
            try:
                path.write_text(json.dumps(cfg))  # 10**400 has no JSON form but Python's: a huge int literal
            except ValueError:
                return
        got = outcome(lm.config_from_hf, path if as_file else cfg)
        if got is REFUSED:
            return
        assert _valid_config(got), got
        if got.vocab * got.hidden + got.layers * got.inter * got.hidden <= 10**6:  # small: run one step
            assert outcome(lambda: Llama.from_config(got).generate([1], 1).shape) in (REFUSED, (1,))

    run()


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", "null", '{"model_type": NaN}', "\udcff", "[" * 50000,
                                  json.dumps({"model_type": "mistral"}), json.dumps({**BASE, "num_key_value_heads": 3}),
                                  json.dumps({**BASE, "num_attention_heads": 0}), json.dumps({**BASE, "head_dim": 7}),
                                  json.dumps({**BASE, "vocab_size": 2**63})])
def test_damaged_config_files_are_r_config(tmp_path, text):
    p = tmp_path / "config.json"
    p.write_bytes(text.encode("utf-8", "surrogateescape"))
    for where in (p, tmp_path, str(p)):
        assert outcome(Llama.from_config, where) is REFUSED
    assert outcome(Llama.from_config, tmp_path / "missing") is REFUSED
    (tmp_path / "sub").mkdir()
    assert outcome(Llama.from_config, tmp_path / "sub") is REFUSED  # a directory without config.json


# --- safetensors checkpoints ----------------------------------------------------------------

DTYPES = ["F64", "F32", "F16", "BF16", "I64", "I32", "I8", "U8", "BOOL", "F8_E4M3", "XX", 3, None]


def _file(header: dict, body: bytes) -> bytes:
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + body


def test_fuzz_safetensors_files(tmp_path):
    """Truncated files, wrong dtypes and shapes, missing and extra tensors, headers that lie
    about offsets or length, junk headers, trailing bytes, NaN values."""
    w = random_weights(TINY, 0, torch.float32)
    good = tmp_path / "good.safetensors"
    safetensors_torch.save_file(w, str(good))
    raw = good.read_bytes()
    hlen = struct.unpack("<Q", raw[:8])[0]
    header, body = json.loads(raw[8:8 + hlen]), raw[8 + hlen:]
    names = sorted(k for k in header if k != "__metadata__")
    f = tmp_path / "t.safetensors"

    @fuzz_settings(250)
    @given(st.integers(0, 11), st.sampled_from(names), st.data())
    def run(kind, name, data):
        h = json.loads(json.dumps(header))
        out = None
        if kind == 0:
            out = raw[:data.draw(st.integers(0, len(raw) - 1))]
        elif kind == 1:
            h[name]["dtype"] = data.draw(st.sampled_from(DTYPES))
        elif kind == 2:
            h[name]["shape"] = data.draw(st.lists(st.one_of(st.integers(-2, 70), st.sampled_from([2**63, 1.5, "4"])),
                                                  max_size=3))
        elif kind == 3:
            h[name]["data_offsets"] = data.draw(st.lists(st.integers(-5, len(body) + 10), max_size=3))
        elif kind == 4:
            del h[name]
        elif kind == 5:
            h["model.layers.0.self_attn.q_proj.bias"] = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
        elif kind == 6:
            out = struct.pack("<Q", data.draw(st.sampled_from([0, 1, hlen + 8, 2**63, 2**64 - 1]))) + raw[8:]
        elif kind == 7:
            out = raw[:8] + data.draw(st.binary(max_size=64)).ljust(hlen, b" ") + body
        elif kind == 8:
            h["__metadata__"] = data.draw(st.one_of(st.integers(), st.text(max_size=2),
                                                    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)))
        elif kind == 9:
            out = raw + data.draw(st.binary(min_size=1, max_size=9))
        elif kind == 10:
            h[name] = data.draw(st.one_of(st.none(), st.integers(), st.text(max_size=2)))
        else:  # a NaN / inf where the weight was
            bad = dict(w)
            bad[name] = w[name].clone().view(-1).index_fill_(0, torch.tensor([0]), data.draw(
                st.sampled_from([math.nan, math.inf, -math.inf]))).view(w[name].shape)
            safetensors_torch.save_file(bad, str(f))
        if kind != 11:
            f.write_bytes(out if out is not None else _file(h, body))
        got = outcome(load_safetensors, f, TINY, dtype=data.draw(st.sampled_from([torch.float32, torch.bfloat16])))
        if got is not REFUSED:  # only harmless damage is accepted: every tensor there, shaped and finite
            assert got.keys() == TINY.tensors().keys() and kind in (1, 8, 9)
            assert all(tuple(t.shape) == TINY.tensors()[n] and bool(t.isfinite().all()) for n, t in got.items())

    run()


def test_checkpoint_paths_that_hold_no_checkpoint_are_r_config(tmp_path):
    (tmp_path / "empty.safetensors").write_bytes(b"")
    (tmp_path / "dir.safetensors").mkdir()
    for p in (tmp_path / "empty.safetensors", tmp_path / "dir.safetensors", tmp_path / "missing.safetensors",
              tmp_path, str(tmp_path / ("a" * 300)), str(tmp_path) + "/a\0b"):
        assert outcome(Llama.from_config, TINY, weights=p) is REFUSED, p


# --- generate() ---------------------------------------------------------------------------
# Each value with whether generate must take it (the oracle): (value, valid).
IDS = [(5, True), (np.int64(3), True), (0, True), (VOCAB - 1, True), (-1, False), (VOCAB, False), (True, False),
       (1.0, False), ("1", False), (None, False), (2**63, False), (torch.tensor([1, 2]), False)]
TEMPERATURE = [(None, True), (0.7, True), (2, True), (1e-320, True), (0.0, False), (-1.0, False), (math.nan, False),
               (math.inf, False), (True, False), ("hot", False), (10**400, False), (np.float32(0.5), False)]
TOP_K = [(None, True), (1, True), (VOCAB, True), (np.int32(3), True), (0, False), (VOCAB + 1, False), (True, False),
         (2.5, False), (torch.tensor(3), False)]
SEED = [(None, True), (0, True), (2**63 - 1, True), (-1, False), (2**63, False), (True, False), (1.5, False)]
N_NEW = [(0, True), (1, True), (3, True), (np.int64(2), True), (-1, False), (True, False), (2.0, False), (None, False),
         (2**63, False), (torch.tensor(2), False), (MAX_POS, False)]
FLAGS = [(True, True), (False, True), (1, False), (None, False), ("yes", False), (np.bool_(True), False)]


def _pick(pool):
    """A (value, valid) of the pool; half the time a valid one, so that valid calls are common."""
    good = [i for i, (_, ok) in enumerate(pool) if ok]
    return st.one_of(st.sampled_from(good), st.sampled_from(range(len(pool)))).map(lambda i: pool[i])


def _prompt(kind, ids, rows):
    """(prompt, valid, T) of one form: a list, a list of rows (ragged or with an empty one), a
    tensor of some dtype, or something that is no prompt."""
    vals = [v for v, _ in ids]
    if kind == "list":
        return vals, bool(ids) and all(o for _, o in ids), len(ids)
    if kind == "rows":
        rs = [ids[:n] for n in rows]
        ok = bool(rs) and all(len(r) == len(rs[0]) and r and all(o for _, o in r) for r in rs)
        return [[v for v, _ in r] for r in rs], ok, len(rs[0]) if rs else 0
    ints = [v if type(v) is int and 0 <= v < 2**31 else 1 for v in vals] or [1]
    if kind in ("int64", "int32", "uint8", "float32", "bool"):
        ok = kind in ("int64", "int32", "uint8") and max(ints) < VOCAB
        return torch.tensor(ints).to(getattr(torch, kind)), ok, len(ints)
    return {"3d": torch.tensor(ints).view(1, 1, -1), "sparse": torch.tensor([ints]).to_sparse(),
            "numpy": np.array(ints), "empty2d": torch.zeros(2, 0, dtype=torch.long), "str": "abc",
            "nested": torch.nested.nested_tensor([torch.tensor(ints)])}[kind], False, len(ints)


@pytest.fixture(scope="module")
def model():
    return Llama.from_config(TINY, seed=1)


def test_fuzz_generate_arguments(model):
    @fuzz_settings(400)
    @given(st.sampled_from(["list", "rows", "int64", "int32", "uint8"]) | st.sampled_from(
               ["float32", "bool", "3d", "sparse", "numpy", "empty2d", "str", "nested"]),
           st.lists(_pick(IDS), max_size=4), st.lists(st.integers(0, 4), max_size=3), _pick(N_NEW),
           st.just(FLAGS[0]) | _pick(FLAGS), _pick(TEMPERATURE), _pick(TOP_K), _pick(SEED), _pick(FLAGS))
    def run(kind, ids, rows, n, greedy, temperature, top_k, seed, return_logits):
        prompt, ok, T = _prompt(kind, ids, rows)
        kw = {"greedy": greedy[0], "return_logits": return_logits[0]}
        if greedy[0] is not True or temperature[0] is seed[0] is None:  # greedy calls mostly without them
            kw.update(temperature=temperature[0], top_k=top_k[0], seed=seed[0])
        ok = ok and n[1] and greedy[1] and return_logits[1]
        if greedy[0] is True:  # greedy takes no sampling argument at all
            ok = ok and all(kw.get(n) is None for n in ("temperature", "top_k", "seed"))
        else:
            ok = ok and temperature[1] and top_k[1] and seed[1]
        if ok and T + int(n[0]) > MAX_POS:
            ok = False
        got = outcome(model.generate, prompt, n[0], **kw)
        assert (got is not REFUSED) == ok, (kind, ids, rows, n, kw)
        if ok:
            new = got[0] if return_logits[0] else got
            assert new.dtype == torch.long and new.shape[-1] == int(n[0])
            assert new.numel() == 0 or (0 <= int(new.min()) and int(new.max()) < VOCAB)

    run()
