"""sim.moe.layout: which GPU holds what, by formula; every layout rule refused with its reason."""
import numpy as np
import pytest

from sim.moe.layout import Layout
from sim.moe.specs import SpecError

DS = Layout.check(16, 128, 64, 8, 2048, "h800-2048", 256)       # DeepSeek-V3: PP16, DP128, EP64


def test_deepseek_layout_by_formula():
    assert DS.gpus == 2048 and DS.groups_per_rank == 2 and DS.traced_rank == 8
    assert DS.gpu(0, 0) == 0 and DS.gpu(3, 5) == 3 * 128 + 5 and DS.gpu(15, 127) == 2047
    assert DS.gpus_of(2, np.array([0, 64])).tolist() == [256, 320]
    assert DS.ep_group(1, 1) == list(range(128 + 64, 128 + 128))          # whole nodes 24..31
    assert DS.group_of_replica(63) == 0 and DS.group_of_replica(64) == 1
    assert DS.group_replicas(1) == list(range(64, 128))


def test_parameter_shard_groups():
    """Dense parameters are copied on every replica of the rank (128 GPUs); an expert's copies
    only on the same position of each EP group: 2,048 / (16 x 64) = 2 GPUs."""
    assert DS.dense_dp_group(2) == list(range(256, 384))
    assert DS.expert_dp_group(2, 5) == [256 + 5, 256 + 64 + 5]
    assert len(DS.expert_dp_group(0, 0)) == 2048 // (16 * 64)


@pytest.mark.parametrize("args,pattern", [
    ((16, 128, 48, 8, 2048, "t", 256), "ep \\(48\\) must divide dp \\(128\\)"),
    ((16, 256, 64, 8, 2048, "t", 256), "4096 GPUs, but topology 't' has 2048"),
    ((4, 12, 12, 8, 64, "t", 48), "multiple of gpus_per_node=8"),
    ((4, 6, 3, 8, 64, "t", 48), "must divide the 8 GPUs per node"),
    ((4, 8, 8, 8, 64, "t", 12), "ep must divide num_experts"),
])
def test_refusals(args, pattern):
    with pytest.raises(SpecError, match=pattern):
        Layout.check(*args)


def test_dense_model_has_no_expert_rule():
    assert Layout.check(4, 4, 4, 8, 16, "t", 0).ep == 4
