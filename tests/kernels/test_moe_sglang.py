"""kernels/moe/moe_sglang.py (the SGLang baseline): the slot alignment SGLang's kernels read,
built in torch (CPU here)."""

import sys

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch")
sys.path.insert(0, str(ROOT / "kernels" / "moe"))
import moe_sglang  # noqa: E402


def reference_align(ei, experts, block_m):
    """moe_align_block_size's documented layout, by loops."""
    flat = ei.flatten().tolist()
    n = len(flat)
    ids, owners = [], []
    for e in range(experts):
        run = [i for i, v in enumerate(flat) if v == e]
        if run:
            padded = -(-len(run) // block_m) * block_m
            ids += run + [n] * (padded - len(run))
            owners += [e] * (padded // block_m)
    return ids, owners


@pytest.mark.parametrize("tokens, block_m", [(1, 16), (3, 64), (16, 16), (17, 32), (100, 128), (512, 64)])
def test_align_matches_the_documented_layout(tokens, block_m):
    g = torch.Generator().manual_seed(tokens * 131 + block_m)
    ei = torch.stack([torch.randperm(128, generator=g)[:8] for _ in range(tokens)])
    sorted_ids, expert_ids, total = moe_sglang.align(ei, 128, block_m)
    ids, owners = reference_align(ei, 128, block_m)
    n = tokens * 8
    size = n * block_m if n < 129 else n + 129 * (block_m - 1)
    assert sorted_ids.numel() == -(-size // 4) * 4  # sized as SGLang sizes it: the kernel's grid
    assert total.tolist() == [len(ids)]
    assert sorted_ids[:len(ids)].tolist() == ids and bool((sorted_ids[len(ids):] == n).all())
    assert expert_ids[:len(owners)].tolist() == owners and bool((expert_ids[len(owners):] == -1).all())


def test_config_is_the_nearest_tuned_batch():
    configs = {1: "a", 16: "b", 128: "c", 4096: "d"}
    assert [moe_sglang.config_for(configs, t) for t in (1, 9, 100, 16384)] == ["a", "b", "c", "d"]


def test_a_missing_wheel_is_reported_not_raised(tmp_path):
    with pytest.raises(moe_sglang.Unavailable):
        moe_sglang.load(tmp_path)


def test_config_lookup_follows_sglang(tmp_path):
    base = tmp_path / moe_sglang.CONFIGS
    for version, name in (("3_6_0", "E=128,N=768"), ("3_1_0", "E=8,N=14336"), ("3_2_0", "E=8,N=14336"),
                          ("3_6_0", "E=8,N=14336,device_name=NVIDIA_H100")):
        (base / f"triton_{version}").mkdir(parents=True, exist_ok=True)
        (base / f"triton_{version}" / f"{name},device_name=NVIDIA_H200.json").write_text("{}")
    assert moe_sglang.find_config(tmp_path, 128, 768, "3.6.0").parent.name == "triton_3_6_0"
    assert moe_sglang.find_config(tmp_path, 8, 14336, "3.6.0").parent.name == "triton_3_2_0"  # newest other
    assert moe_sglang.find_config(tmp_path, 64, 1024, "3.6.0") is None


def test_config_lookup_takes_the_running_gpus_file(tmp_path):
    base = tmp_path / moe_sglang.CONFIGS / "triton_3_6_0"
    base.mkdir(parents=True)
    for device in ("NVIDIA_H200", "NVIDIA_H100_80GB_HBM3"):
        (base / f"E=128,N=768,device_name={device}.json").write_text("{}")
    h100 = moe_sglang.find_config(tmp_path, 128, 768, "3.6.0", "NVIDIA H100 80GB HBM3")
    assert h100.name == "E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json"
    assert moe_sglang.find_config(tmp_path, 128, 768, "3.6.0", "NVIDIA H20") is None  # no file: SGLang's default


def test_default_config_is_sglangs_bf16_default():
    d = moe_sglang.default_configs(64)
    assert moe_sglang.config_for(d, 64)["BLOCK_SIZE_M"] == 16
    assert moe_sglang.config_for(d, 65)["BLOCK_SIZE_M"] == 64
    assert moe_sglang.config_for(d, 16384)["BLOCK_SIZE_K"] == 32
