"""Virtual stages as Megatron builds them (issue 57, in part): layers per virtual stage, and the
embedding and the loss counted as layers of the pipeline split (Megatron's
account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split)."""
import pytest

from sim.training.costs.chunk import stage_layer_counts
from sim.training.model.specs import RunSpec, SpecError
from sim.training.scenario import Scenario

GPT_22 = "zb-gpt-1.5b"     # the Zero Bubble paper's 1.5B GPT: 22 layers


def spec(**over) -> RunSpec:
    base = dict(model=GPT_22, gpu="a100", topology="zb-a100-roce", pp=8, dp=1, ep=1, schedule="interleaved-1f1b",
                microbatches=16, seq_len=1024, layers_per_virtual_stage=1, embedding_stage=True, loss_stage=True)
    return RunSpec(**{**base, **over})


def test_22_layers_with_embedding_and_loss_over_8_ranks_of_3_virtual_stages_by_hand():
    """24 slots (22 layers, the embedding, the loss) at one a virtual stage: 3 virtual stages per
    rank; virtual stage s on rank s mod 8. Rank 0 holds the embedding alone (stage 0), layer 8
    (stage 8) and layer 16 (stage 16); rank 7 holds layers 7 and 15 (stages 7, 15) and the loss
    alone (stage 23); layer i (1-based) is on stage i."""
    counts = stage_layer_counts(22, 24, embedding=True, loss=True)
    assert counts == [0] + [1] * 22 + [0]
    first_layer = [sum(counts[:s]) + 1 for s in range(24)]            # 1-based index of a stage's first layer
    holds = {r: [(s, first_layer[s] if counts[s] else None) for s in range(r, 24, 8)] for r in (0, 7)}
    assert holds[0] == [(0, None), (8, 8), (16, 16)]
    assert holds[7] == [(7, 7), (15, 15), (23, None)]
    assert spec().virtual_chunks(22) == 3


def test_the_scenario_places_the_embedding_and_the_loss_on_their_own_virtual_stages():
    sc = Scenario(spec(model=GPT_22))
    assert sc.schedule.num_stages == 24 and sc.chunk.layers_per_stage == [0] + [1] * 22 + [0]
    assert sc.schedule.placement.rank(0, 0) == 0 and sc.schedule.placement.rank(0, 23) == 7
    stages = sc.chunk.stage_layers
    assert stages[0] == [] and stages[23] == [] and all(len(s) == 1 for s in stages[1:23])


def test_without_virtual_stages_the_first_and_last_stage_hold_one_layer_fewer():
    """Plain 1F1B at 8 ranks: 24 slots, 3 a stage; the first and last stage hold 2 layers."""
    assert stage_layer_counts(22, 8, embedding=True, loss=True) == [2, 3, 3, 3, 3, 3, 3, 2]
    assert stage_layer_counts(22, 8, embedding=True) == [2, 3, 3, 3, 3, 3, 3, 2]   # 23 slots: the last stage 2
    assert stage_layer_counts(22, 8) == [3, 3, 3, 3, 3, 3, 2, 2]


@pytest.mark.parametrize("over,pattern", [
    (dict(layers_per_virtual_stage=5), r"22 layers \+ 2 for the embedding and loss = 24 do not split into virtual "
                                       r"stages of 5 over pp=8 ranks \(need a multiple of 40\)"),
    (dict(schedule="1f1b"),
     r"layers_per_virtual_stage=1 is for the interleaved-1f1b and combined-1f1b schedules, not '1f1b'"),
    (dict(chunks=3), r"layers_per_virtual_stage and chunks both set the virtual stages: give one"),
    (dict(layers_per_virtual_stage=None, chunks=2, first_stage_layers=2),
     r"embedding_stage counts the embedding as a layer of the even split; it cannot be combined with stage_layers"),
    (dict(embedding_stage=1), r"RunSpec.embedding_stage must be true or false, got 1"),
])
def test_bad_virtual_stages_get_one_line_naming_the_numbers(over, pattern):
    with pytest.raises(SpecError, match=pattern):
        Scenario(spec(model=GPT_22, **over))


def test_more_stages_than_slots_are_refused_and_one_stage_holds_everything():
    with pytest.raises(SpecError, match=r"layers \(22\) with the embedding and loss counted \(24\) cannot be split "
                                        r"over 30 pipeline stages"):
        stage_layer_counts(22, 30, embedding=True, loss=True)
    assert stage_layer_counts(1, 3, embedding=True, loss=True) == [0, 1, 0]
    assert stage_layer_counts(22, 1, embedding=True, loss=True) == [22]


def test_megatron_s_microbatch_group_reaches_the_schedule_and_the_memory():
    """microbatch_group_size_per_vp_stage G: M = 20 over 8 ranks runs in groups of 10 (refused in
    groups of P = 8); at M = 16, G = 16 warms rank 0 up by 2(P-1) + (v-1)G = 14 + 32 = 46 forwards
    against G = 8's 30, so it holds more micro-batches' activations at its peak."""
    from sim.training.step import MoEStep
    sc = Scenario(spec(microbatches=20, microbatch_group_size_per_vp_stage=10))
    ops = sc.schedule.ranks[0]
    assert [op.kind for op in ops[:14 + 20]] == ["F"] * 34 and ops[35].kind == "B"
    assert MoEStep(sc).simulate().step_time_s > 0
    with pytest.raises(Exception, match=r"interleaved-1f1b needs M divisible by P .*got M=20, P=8"):
        Scenario(spec(microbatches=20))
    peak = {g: MoEStep(Scenario(spec(microbatch_group_size_per_vp_stage=g))).simulate().ranks[0].memory
            for g in (8, 16)}
    assert peak[16].peak_microbatches > peak[8].peak_microbatches
    assert peak[16].activations_gb > peak[8].activations_gb


def test_a_microbatch_group_for_another_schedule_is_one_line():
    with pytest.raises(SpecError, match=r"^RunSpec.microbatch_group_size_per_vp_stage=4 is for the interleaved-1f1b "
                                        r"and combined-1f1b schedules, not '1f1b'$"):
        spec(schedule="1f1b", layers_per_virtual_stage=None, embedding_stage=False, loss_stage=False,
             microbatch_group_size_per_vp_stage=4)
    with pytest.raises(SpecError, match=r"microbatch_group_size_per_vp_stage"):
        spec(microbatch_group_size_per_vp_stage=0)
