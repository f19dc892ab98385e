"""The decode megakernel of issue 43 on an sm_90 GPU (skipped without one): //kernels/decode's
llama_tiny builds (split-KV and simple attention, linked and control, the unfused baseline)
against the fp32 reference with issue 43's criterion over 200 teacher-forced steps, the logits
poisoned with NaN before every step, and the kernel's own argmax token and position; CUDA-graph
replays chaining greedy steps; a prompt prefilled through the serving attention (llama_prefill);
the counterexample. Each case runs in a child process under a
watchdog (benchmarks/llama_decode_bench.py's workers), so a hung kernel fails its case instead of
the run. Build first: tools/bazel build //kernels/decode/... //experiments:llama_tiny_mutations
//kernels/attention:attn_causal_d64 --output_groups=+control."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import ROOT

pytestmark = pytest.mark.requires_gpu(sm=90)
BENCH = ROOT / "benchmarks" / "llama_decode_bench.py"
sys.path.insert(0, str(ROOT / "benchmarks"))


def _built(*paths):
    for p in paths:
        if not (ROOT / "bazel-bin" / p).is_file():
            pytest.skip(f"bazel-bin/{p} not built (tools/bazel build //kernels/decode/... //experiments:llama_tiny_mutations "
                        "--output_groups=+control)")


@pytest.mark.parametrize("attention,control,unfused", [("split", False, False), ("simple", False, False),
                                                       ("split", True, False), ("split", False, True)])
def test_teacher_forced_steps_meet_issue_43s_criterion(attention, control, unfused):
    from llama_decode_bench import check_args, run_watched
    _built("kernels/decode/llama_tiny.cubin")
    outcome, said = run_watched(check_args("llama_tiny", 200, attention, control, unfused), 300)
    assert outcome == "correct", said


def test_each_op_of_the_unfused_build_agrees_with_the_emulator():
    """decode_trace.py: op by op over lent activation buffers, so a failure names the op."""
    _built("kernels/decode/llama_tiny_unfused.cubin")
    try:
        p = subprocess.run([sys.executable, str(ROOT / "tests" / "kernels" / "decode_trace.py"), "--steps", "3"],
                           capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("decode_trace.py: no result in 300 s (a hang)")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]


def test_graph_replays_chain_greedy_steps():
    from llama_decode_bench import run_watched
    _built("kernels/decode/llama_tiny.cubin", "kernels/attention/attn_causal_d64.cubin")
    outcome, said = run_watched(["worker-graph"], 300)
    assert outcome == "correct", said


def test_the_attention_prefill_then_decode_meets_issue_43s_criterion():
    """300 prompt positions through the serving attention's causal kernel, the last one and 16
    decode steps through the megakernel: every logits row against the fp32 reference."""
    from llama_decode_bench import run_watched
    _built("kernels/decode/llama_tiny.cubin", "kernels/attention/attn_causal_d64.cubin")
    outcome, said = run_watched(["worker-prefill", "--model", "llama_tiny", "--prompt", "300", "--steps", "16"], 300)
    assert outcome == "correct", said


def test_a_full_cache_is_refused_before_launch():
    import torch
    from llama_decode_bench import _config, _weights
    from llama_megakernel import MegakernelStep
    from pipelink.runtime import LaunchError
    _built("kernels/decode/llama_tiny.cubin")
    cfg = _config()
    s = MegakernelStep(cfg, _weights(cfg, seed=1), max_seq=4)
    with pytest.raises(LaunchError) as e:
        s.prefill(torch.zeros(1, 5, dtype=torch.long, device="cuda"))
    assert e.value.code == "R-PARAM" and "max_seq" in e.value.hint and int(s.state[1]) == 0


def test_graph_replays_stop_at_the_caches_capacity():
    """A replay at a full cache appends nothing and publishes nothing: the position stays at
    max_seq, the token is unchanged and the error flag is set."""
    import torch
    from llama_decode_bench import _config, _weights
    from llama_megakernel import MegakernelStep
    _built("kernels/decode/llama_tiny.cubin")
    cfg = _config()
    s = MegakernelStep(cfg, _weights(cfg, seed=3), max_seq=6, prefill="megakernel")
    s.prefill(torch.arange(5, dtype=torch.long, device="cuda")[None])
    g = s.graph()
    g.replay()  # position 5: the last that fits
    torch.cuda.synchronize()
    token, pos, err = (int(v) for v in s.state[:3])
    assert (pos, err) == (6, 0)
    g.replay()
    torch.cuda.synchronize()
    assert [int(v) for v in s.state[:3]] == [token, 6, 1]


def test_the_counterexample_plain_link_misbehaves_and_pipelink_propagates():
    """//experiments:llama_tiny_mutations: the weight stream rebuilt with half-size tiles."""
    _built("experiments/llama_tiny_mutations.json")
    p = subprocess.run([sys.executable, str(BENCH), "counterexample", "--watchdog", "120"], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_ragged_batch_meets_issue_43s_criterion():
    """llama_tiny_b3: prompts of 7, 1 and 300 tokens through the attention prefill, each into its
    own cache, then 24 teacher-forced steps of the batch: every sequence's logits rows against the
    fp32 reference, the positions each sequence's own."""
    _built("kernels/decode/llama_tiny_b3.cubin", "kernels/attention/attn_causal_d64.cubin")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "llama_decode_batch_bench.py"), "check",
                        "--watchdog", "240"], capture_output=True, text=True, timeout=900)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(("PASS", "FAIL"))]
    assert p.returncode == 0 and lines and all(ln.startswith("PASS") for ln in lines), p.stdout[-3000:] + p.stderr[-1000:]
