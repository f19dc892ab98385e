"""The decode megakernel of issue 43 on an sm_90 GPU (skipped without one): //kernels/decode's
llama_tiny build (split-KV and simple attention, linked and control) against the fp32 reference
with issue 43's criterion over teacher-forced steps, the logits buffer poisoned with NaN before
every step; the kernel's own argmax token and position; CUDA-graph replays chaining greedy
steps; the cache-capacity refusal. Build first: tools/bazel build //kernels/decode/...
--output_groups=+control."""

from __future__ import annotations

import sys

import pytest
import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "kernels" / "decode"))
import llama_models as lm  # noqa: E402
import llama_reference as ref  # noqa: E402
from llama_weights import random_weights  # noqa: E402

pytestmark = [pytest.mark.requires_gpu(sm=90), pytest.mark.usefixtures("one_torch_thread")]

TINY = lm.LlamaConfig("llama_tiny", 1024, 512, 2, 8, 2, 64, 1024, 1e-5, 500000.0,
                      lm.Llama3RopeScaling(32.0, 1.0, 4.0, 8192), True, 4096)
STEPS = 200  # past 3 x 64-position chunks of every head


def _step(**kw):
    from llama_megakernel import MegakernelStep
    path = ROOT / "bazel-bin" / "kernels" / "decode" / "llama_tiny.cubin"
    if not path.is_file():
        pytest.skip(f"{path} not built (tools/bazel build //kernels/decode/... --output_groups=+control)")
    return MegakernelStep(TINY, kw.pop("weights"), max_seq=kw.pop("max_seq", 256), **kw)


@pytest.fixture(scope="module")
def case():
    w = random_weights(TINY, seed=11)
    ids = torch.randint(0, TINY.vocab, (1, STEPS), generator=torch.Generator().manual_seed(4))
    ref_logits, _ = ref.prefill(w, TINY, ids)
    return w, ids, ref_logits[0]


@pytest.mark.parametrize("attention,control,unfused", [("split", False, False), ("simple", False, False),
                                                       ("split", True, False), ("split", False, True)])
def test_teacher_forced_steps_meet_issue_43s_criterion(case, attention, control, unfused):
    w, ids, ref_logits = case
    s = _step(weights=w, attention=attention, control=control, unfused=unfused)
    got = []
    for n, t in enumerate(ids[0].tolist()):
        s.logits.fill_(float("nan"))
        s.state[0] = t
        s.launch()
        torch.cuda.synchronize()
        got.append(s.logits.cpu().clone())
        state = s.state.cpu().tolist()
        assert state[1] == n + 1 and state[2] == 0
        assert state[0] == int(torch.argmax(got[-1]))  # the kernel's argmax (ties: the smaller index)
    got = torch.stack(got).double()
    assert torch.isfinite(got).all()
    a = ref.agreement(got, ref_logits)
    assert a["ok"], a


def test_graph_replays_chain_greedy_steps(case):
    w, ids, _ = case
    s = _step(weights=w)
    prompt = ids[0, :5].tolist()
    s.prefill(ids[:, :5])
    g = s.graph()
    tokens = [int(s.state[0])]
    for _ in range(20):
        g.replay()
        tokens.append(int(s.state[0]))
    torch.cuda.synchronize()
    # the same chain through the reference, greedy from the same prompt
    from llama import Llama, ReferenceStep
    m = Llama(TINY, w)
    want = m.generate(prompt, 21, step=ReferenceStep(TINY, m.weights)).tolist()
    agree = sum(a == b for a, b in zip(tokens, want))
    assert agree >= 19, (tokens, want)  # near-ties may differ in bf16
    assert int(s.state[1]) == 5 + 20


def test_a_full_cache_is_refused_before_launch(case):
    from pipelink.runtime import LaunchError
    w, ids, _ = case
    s = _step(weights=w, max_seq=4)
    with pytest.raises(LaunchError) as e:
        s.prefill(ids[:, :5])
    assert e.value.code == "R-PARAM" and "max_seq" in e.value.hint


def test_the_counterexample_plain_link_misbehaves_and_pipelink_propagates():
    """//experiments:llama_tiny_mutations: the weight stream rebuilt with half-size tiles."""
    import subprocess
    if not (ROOT / "bazel-bin" / "experiments" / "llama_tiny_mutations.json").is_file():
        pytest.skip("tools/bazel build //experiments:llama_tiny_mutations")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "llama_decode_bench.py"), "counterexample",
                        "--watchdog", "120"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
