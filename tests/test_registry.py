"""Every refused input gets a message naming the rule and the values."""
import pytest

from sim.schedules import SCHEDULE_NAMES, ScheduleConfigError, make_schedule


@pytest.mark.parametrize("name,P,M,v,pattern", [
    ("dualpipe", 5, 10, None, r"even P >= 2.*P=5"),
    ("dualpipe", 4, 6, None, r"even M >= 2P, got M=6 with P=4 \(2P=8\)"),
    ("dualpipe", 4, 9, None, r"even M >= 2P, got M=9"),
    ("dualpipev", 4, 7, None, r"M >= 2P, got M=7 with P=4 \(2P=8\)"),
    ("chimera", 4, 10, None, r"M divisible by D = P.*M=10, P=4"),
    ("chimera", 4, 4, None, r"M >= 2P, got M=4, P=4"),     # whole units of D, but only one
    ("chimera", 3, 6, None, r"even number of stages.*P=3"),
    ("1f1b", 0, 4, None, r"pp \(P, pipeline ranks\) must be an integer >= 1, got 0"),
    ("1f1b", -2, 4, None, r"must be an integer >= 1, got -2"),
    ("gpipe", 2, 0, None, r"microbatches \(M\) must be an integer >= 1, got 0"),
    ("interleaved-1f1b", 4, 8, 1, r"chunks \(v, model chunks per rank\) must be an integer >= 2, got 1"),
    ("interleaved-1f1b", 4, 8, None, r"needs chunks"),
    ("interleaved-1f1b", 4, 6, 2, r"M divisible by P.*M=6, P=4"),
    ("1f1b", 4, 8, 3, r"chunks \(v\) applies only to interleaved-1f1b and combined-1f1b, got chunks=3 for 1f1b"),
    ("combined-1f1b", 1, 8, 2, r"combined-1f1b on one rank \(P=1, no pipeline\) takes chunks 1, got chunks=2"),
    ("combined-1f1b", 4, 8, None, r"combined-1f1b with P=4 needs chunks \(v, model chunks per rank\) >= 2 .* got "
                                  r"chunks=None"),
    ("combined-1f1b", 4, 8, 1, r"needs chunks .* >= 2 .*got chunks=1"),
    ("combined-1f1b", 4, 6, 2, r"combined-1f1b needs M divisible by P .*M=6, P=4"),
    ("bogus", 4, 8, None, r"unknown schedule 'bogus'; valid schedules: gpipe, 1f1b"),
])
def test_refused(name, P, M, v, pattern):
    with pytest.raises(ScheduleConfigError, match=pattern):
        make_schedule(name, P, M, v)


def test_non_integer_refused():
    with pytest.raises(ScheduleConfigError, match="must be an integer"):
        make_schedule("1f1b", 4.5, 8)


def test_unknown_name_lists_all():
    with pytest.raises(ScheduleConfigError) as exc:
        make_schedule("dual-pipe", 4, 8)
    for name in SCHEDULE_NAMES:
        assert name in str(exc.value)


def test_a_bool_is_not_a_count():
    with pytest.raises(ScheduleConfigError, match=r"pp \(P, pipeline ranks\) must be an integer, got True"):
        make_schedule("1f1b", True, 8)


def test_interleaved_without_chunks_says_what_it_needs():
    with pytest.raises(ScheduleConfigError) as exc:
        make_schedule("interleaved-1f1b", 4, 8)
    assert str(exc.value) == "interleaved-1f1b needs chunks (v, model chunks per rank) >= 2"


def test_one_chunk_is_every_schedule_s_own_shape():
    assert make_schedule("1f1b", 4, 8, 1).ranks == make_schedule("1f1b", 4, 8).ranks


def test_op_limit_counts_interleaved_chunks_and_names_the_schedule():
    """The op estimate is 3 M P max(v, 2): 384 for interleaved-1f1b with v = 4 at P = 4, M = 8
    (192 without its chunks), refused over a limit of 383 with a message naming the schedule."""
    from sim import limits
    with limits.raised(max_ops=383):
        with pytest.raises(limits.TooLarge) as exc:
            make_schedule("interleaved-1f1b", 4, 8, 4)
        assert str(exc.value).startswith("schedule interleaved-1f1b with P=4, M=8 needs about 384 ops")
        make_schedule("1f1b", 4, 8, 1)                                       # 192: allowed
    with limits.raised(max_ops=384):
        make_schedule("interleaved-1f1b", 4, 8, 4)


def test_zb_auto_without_a_limit_says_how_to_give_one():
    with pytest.raises(ScheduleConfigError) as exc:
        make_schedule("zb-auto", 4, 8)
    assert str(exc.value) == ("zb-auto needs memory_limit (--memory-limit N: micro-batches of activations per stage, "
                              "at least 1; zb-1p is P, zb-2p is 2P)")


@pytest.mark.parametrize("limit", [0, 2e9])
def test_a_zb_auto_limit_outside_its_range_is_one_line(limit):
    with pytest.raises(ScheduleConfigError, match=r"^memory_limit \(micro-batches of activations per stage\) must be "
                                                  r"a finite number in \[1, 1,000,000,000\], got "):
        make_schedule("zb-auto", 4, 8, memory_limit=limit)


def test_which_schedules_take_model_chunks():
    from sim.schedules import takes_chunks
    assert takes_chunks("interleaved-1f1b", 1) and takes_chunks("interleaved-1f1b", 4)
    assert takes_chunks("combined-1f1b", 4) and not takes_chunks("combined-1f1b", 1)
    assert not any(takes_chunks(name, 4) for name in ("1f1b", "dualpipe", "zbv"))


@pytest.mark.parametrize("name,P,M,v,group,pattern", [
    ("interleaved-1f1b", 4, 10, 2, 3, r"^microbatch_group_size_per_vp_stage must lie in \[P, M\] = \[4, 10\] "
                                      r"\(Megatron-Core's rule\), got 3$"),
    ("interleaved-1f1b", 4, 10, 2, 11, r"must lie in \[P, M\] = \[4, 10\].*got 11$"),
    ("combined-1f1b", 4, 10, 2, 7, r"^microbatch_group_size_per_vp_stage 7 leaves a last group of M mod G = 3"),
    ("interleaved-1f1b", 4, 11, 2, 5, r"last group of M mod G = 1 micro-batches, fewer than P=4"),
    ("interleaved-1f1b", 4, 10, 2, 0, r"microbatch_group_size_per_vp_stage \(G, micro-batches a model chunk takes "
                                      r"at a time\) must be an integer >= 1, got 0"),
    ("1f1b", 4, 8, None, 4, r"^microbatch_group_size_per_vp_stage applies only to interleaved-1f1b and to "
                            r"combined-1f1b over a pipeline \(P > 1\), got 4 for 1f1b with P=4$"),
    ("combined-1f1b", 1, 8, None, 2, r"applies only to .* got 2 for combined-1f1b with P=1"),
    ("interleaved-1f1b", 4, 10, 2, None, r"needs M divisible by P .*microbatch_group_size_per_vp_stage G sets "
                                         r"another group, P <= G <= M, the least here 5\), got M=10, P=4"),
    ("combined-1f1b", 4, 7, 2, None, r"P <= G <= M, the least here 7\), got M=7, P=4"),
    ("interleaved-1f1b", 3, 8, 2, None, r"P <= G <= M, the least here 4\), got M=8, P=3"),
    ("interleaved-1f1b", 3, 10, 2, None, r"the least here 5\), got M=10, P=3"),    # 3 leaves 1, 4 leaves 2
    ("interleaved-1f1b", 3, 7, 2, None, r"the least here 4\), got M=7, P=3"),      # 4 leaves 3 = P: allowed
    ("interleaved-1f1b", 2, 1, 2, None, r"^interleaved-1f1b needs M >= P \(Megatron sends groups of at least P "
                                        r"micro-batches through each chunk\), got M=1, P=2$"),
    ("combined-1f1b", 4, 2, 2, 4, r"^combined-1f1b needs M >= P .*got M=2, P=4$"),
])
def test_a_group_megatron_refuses_is_one_line(name, P, M, v, group, pattern):
    with pytest.raises(ScheduleConfigError, match=pattern):
        make_schedule(name, P, M, v, group=group)


def test_a_group_lifts_the_multiple_of_p_rule():
    """M = 10 over P = 4: refused in groups of P, run in groups of 5 (two full ones) or of 6 (a last
    group of 4 = P), as Megatron-Core allows."""
    for group in (5, 6, 10):
        assert make_schedule("interleaved-1f1b", 4, 10, 2, group=group).microbatches == 10
    assert make_schedule("interleaved-1f1b", 4, 8, 2, group=4).ranks == make_schedule("interleaved-1f1b", 4, 8, 2).ranks
