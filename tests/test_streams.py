"""The lockstep stream scheduler: hand-worked cases, barriers, and a SimPy evaluator to agree with."""
import numpy as np
import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st

from sim.training.costs.chunk import LayerCost, StageEnds
from sim.training.costs.parts import backward_parts, forward_parts, overlapped_parts
from sim.training.costs.streams import (
    COMM,
    COMPUTE,
    DP_COMM,
    Part,
    as_streams,
    compile_plan,
    compute_durations,
    run_op,
    run_op_one,
)


def _run(comp, comm, start, load=None, slowdown=1.0, comm_time=1.0):
    plan = compile_plan(comp, comm)
    start = np.asarray(start, dtype=float)
    load = np.ones_like(start) if load is None else np.asarray(load, dtype=float)
    return run_op(plan, start, compute_durations(plan, load, slowdown), [comm_time] * len(comm), record=True)


def test_chain_is_the_sum_of_its_parts():
    layer = LayerCost(1.0, 0.0, 0.0, 2.0, 0.0, 0.0, True, 1.0, 0.0)
    t = _run(*as_streams(forward_parts([layer, layer], StageEnds(head_f=0.5))), [10.0], comm_time=0.25, slowdown=3.0)
    # 2 x (ATTN 1 + dispatch 0.25 + MLP 2 + combine 0.25) + head 0.5; a chain never shares SMs
    assert t.end[0] == pytest.approx(10 + 2 * 3.5 + 0.5)
    assert t.compute_s[0] == pytest.approx(6.5) and t.comm_s[0] == pytest.approx(1.0)


def test_fb_unit_worked_by_hand_with_shared_sms():
    """One MoE layer each way, all-to-all 1.5 s, comm kernels take half the SMs (slowdown 2).
    COMBINE(B) 0-1.5 | ATTN(F) 0-2 (shared) | DISPATCH(F) 2-3.5 | MLP(B) 2-6 (shared) |
    DISPATCH(B) 6-7.5 | MLP(W) 6-8 (shared) | MLP(F) 8-10 | COMBINE(F) 10-11.5 | ATTN(B) 10-12
    (shared) | ATTN(W) 12-13."""
    layer = LayerCost(1.0, 1.0, 1.0, 2.0, 2.0, 1.0, True, 0.9, 0.0)
    t = _run(*overlapped_parts([layer], [layer], StageEnds(), StageEnds()), [0.0], slowdown=2.0, comm_time=1.5)
    got = {p.name: (p.start, p.end) for p in t.parts}
    assert got == {"COMBINE(B)": (0, 1.5), "ATTN(F)": (0, 2), "DISPATCH(F)": (2, 3.5), "MLP(B)": (2, 6),
                   "DISPATCH(B)": (6, 7.5), "MLP(W)": (6, 8), "MLP(F)": (8, 10), "COMBINE(F)": (10, 11.5),
                   "ATTN(B)": (10, 12), "ATTN(W)": (12, 13)}
    assert {p.name: p.stretch for p in t.parts if p.stream == COMPUTE} == {
        "ATTN(F)": 2.0, "MLP(B)": 2.0, "MLP(W)": 2.0, "MLP(F)": 1.0, "ATTN(B)": 2.0, "ATTN(W)": 1.0}
    assert t.end[0] == 13 and t.compute_s[0] == 13 and t.comm_s[0] == 6


def test_all_to_all_waits_for_the_whole_group():
    """Two GPUs, the second's experts get twice the tokens and it starts 0.5 s late: both leave
    each all-to-all together, 1 s after the last one launched it."""
    layer = LayerCost(1.0, 0.0, 0.0, 2.0, 0.0, 0.0, True, 1.0, 0.0)
    t = _run(*as_streams(forward_parts([layer], StageEnds())), [0.0, 0.5], load=[1.0, 2.0])
    assert list(t.end) == [7.5, 7.5]          # ATTN to 1.5, dispatch to 2.5, MLP to 6.5, combine to 7.5
    assert list(t.compute_s) == [3.0, 5.0]
    assert list(t.comm_s) == [4.5, 2.0]       # the fast GPU waits at both barriers
    assert list(t.peer_wait_s) == [2.5, 0.0]  # 1.0 -> 1.5 at the dispatch, 4.5 -> 6.5 at the combine
    dispatch = next(p for p in t.parts if p.name.startswith("DISPATCH"))
    assert (dispatch.start, dispatch.peer_wait, dispatch.end) == (1.0, 0.5, 2.5)   # the first GPU's record


def test_cycle_is_refused():
    a = Part(COMPUTE, "A", 1.0, after=[(COMM, 0)])
    b = Part(COMM, "B", shape="dispatch", after=[(COMPUTE, 0)])
    with pytest.raises(ValueError, match="wait for each other"):
        compile_plan([a], [b])


def test_cycle_is_refused_once_the_compute_stream_is_done():
    """A communication part that waits for a compute part the op does not have: the same error,
    not an index error, though every compute part has been visited."""
    with pytest.raises(ValueError, match="wait for each other"):
        compile_plan([], [Part(COMM, "B", shape="dispatch", after=[(COMPUTE, 0)])])


def test_parts_are_recorded_only_when_asked():
    comp, comm = as_streams([Part(COMPUTE, "A", 1.0), Part(COMM, "D", shape="dispatch")])
    plan = compile_plan(comp, comm)
    start = np.zeros(1)
    assert run_op(plan, start, compute_durations(plan, np.ones(1), 1.0), [0.5]).parts == []
    assert len(run_op(plan, start, compute_durations(plan, np.ones(1), 1.0), [0.5], record=True).parts) == 2


def test_sm_sharing_starts_at_a_launch_and_stops_at_an_end():
    """A compute part that starts at the instant a communication kernel is launched shares the SMs
    (slowdown 2: 1 s -> 2 s); one that starts at the instant it ends does not."""
    launch_together = _run([Part(COMPUTE, "A", 1.0)], [Part(COMM, "D", shape="dispatch")], [0.0], slowdown=2.0)
    assert launch_together.end[0] == 2.0 and launch_together.compute_s[0] == 2.0
    after_end = _run([Part(COMPUTE, "A", 1.0, after=[(COMM, 0)])], [Part(COMM, "D", shape="dispatch")], [0.0],
                     slowdown=2.0)
    assert after_end.end[0] == 2.0 and after_end.compute_s[0] == 1.0      # comm 0-1, then A 1-2 alone


def test_a_part_beside_a_communication_kernel_takes_its_own_ratio():
    """A part that knows its own ratio (its kernels costed on the SMs and HBM the kernel leaves:
    ``beside`` 1.25) runs 1 s -> 1.25 s beside it, whatever the run's ratio (slowdown 2); one that
    does not (``beside`` 0) takes the run's 2; alone both take their 1 s. The layer parts of an
    F&B unit carry their layer's ratios."""
    comm = [Part(COMM, "D", shape="dispatch")]
    own = _run([Part(COMPUTE, "A", 1.0, beside=1.25)], comm, [0.0], slowdown=2.0, comm_time=5.0)
    assert own.end[0] == 5.0 and own.compute_s[0] == 1.25
    assert _run([Part(COMPUTE, "A", 1.0)], comm, [0.0], slowdown=2.0, comm_time=5.0).compute_s[0] == 2.0
    alone = _run([Part(COMPUTE, "A", 1.0, beside=1.25, after=[(COMM, 0)])], comm, [0.0], slowdown=2.0)
    assert alone.compute_s[0] == 1.0
    layer = LayerCost(1.0, 1.0, 1.0, 2.0, 2.0, 1.0, True, 0.9, 0.0, beside=(("attn_f", 1.1), ("mlp_i", 1.3)))
    comp, _ = overlapped_parts([layer], [layer], StageEnds(), StageEnds())
    assert {p.name: p.beside for p in comp} == {"ATTN(F)": 1.1, "MLP(B)": 1.3, "MLP(W)": 0.0, "MLP(F)": 0.0,
                                                "ATTN(B)": 0.0, "ATTN(W)": 0.0}


def test_sm_sharing_is_decided_per_gpu_of_the_group():
    """Two GPUs, slowdown 2, all-to-all 1 s launched at 0 (ends at 1). A0's routed work makes it
    0.5 / 0.25 s at full SMs, shared 1.0 / 0.5 s. A1 (1 s) then starts at 1.0 on GPU 0, the
    instant the kernel ends (alone: 1 s), and at 0.5 on GPU 1, while it runs (shared: 2 s)."""
    t = _run([Part(COMPUTE, "A0", 1.0, routed_share=1.0), Part(COMPUTE, "A1", 1.0)],
             [Part(COMM, "D", shape="dispatch")], [0.0, 0.0], load=[0.5, 0.25], slowdown=2.0)
    assert list(t.end) == [2.0, 2.5] and list(t.compute_s) == [2.0, 2.5]
    # the parts are recorded as the group's first GPU ran them: A0 shared (0-1, 2x), A1 alone (1-2)
    assert [(p.name, p.start, p.end, p.stretch) for p in t.parts if p.stream == COMPUTE] == [
        ("A0", 0.0, 1.0, 2.0), ("A1", 1.0, 2.0, 1.0)]


def test_sm_sharing_counts_any_kernel_running_at_the_start():
    """Two all-to-alls back to back, 0-1 and 1-2, slowdown 2. P0 (shared on both GPUs: 1.5 / 0.5 s)
    leaves X to start at 1.5 on GPU 0 (inside the second kernel) and at 0.5 on GPU 1 (inside the
    first, before the second is launched): X shares the SMs on both (1 s -> 2 s)."""
    t = _run([Part(COMPUTE, "P0", 1.0, routed_share=1.0), Part(COMPUTE, "X", 1.0)],
             [Part(COMM, "D", shape="dispatch"), Part(COMM, "C", shape="combine")], [0.0, 0.0],
             load=[0.75, 0.25], slowdown=2.0)
    assert list(t.end) == [3.5, 2.5] and list(t.compute_s) == [3.5, 2.5]


def _simpy_streams(comp, comm, comm_time):
    """Independent evaluator: the streams (compute, and each communication lane) as SimPy
    processes with events (no SM sharing)."""
    env = simpy.Environment()
    done = ([env.event() for _ in comp], [env.event() for _ in comm])
    times = {}

    def stream(kind, parts, lane=0):
        for i, part in enumerate(parts):
            if kind == COMM and part.lane != lane:
                continue
            for s, j in part.after:
                yield done[s][j]
            t0 = env.now
            yield env.timeout(part.seconds if kind == COMPUTE else comm_time)
            times[part.name, kind, i] = (t0, env.now)
            done[kind][i].succeed()

    env.process(stream(COMPUTE, comp))
    env.process(stream(COMM, comm))
    env.process(stream(COMM, comm, lane=1))
    env.run()
    return env.now, times


layers = st.builds(LayerCost, *[st.floats(0.01, 5.0)] * 6, st.booleans(), st.just(0.0), st.just(0.0),
                   st.floats(0, 2), st.floats(0, 2))
ends = st.builds(StageEnds, *[st.floats(0, 2)] * 5)


@given(st.lists(layers, max_size=3), st.lists(layers, max_size=3), ends, ends, st.floats(0.01, 3.0), st.booleans(),
       st.booleans())
def test_agrees_with_a_simpy_evaluator(f_layers, b_layers, f_ends, b_ends, comm_time, plain, zero3):
    if plain:
        comp, comm = as_streams(backward_parts(b_layers, b_ends, with_w=True, zero3=zero3)
                                + forward_parts(f_layers, f_ends, zero3=zero3))
    else:
        comp, comm = overlapped_parts(f_layers, b_layers, f_ends, b_ends, zero3=zero3)
    end, times = _simpy_streams(comp, comm, comm_time)
    t = _run(comp, comm, [0.0], comm_time=comm_time)
    assert t.end[0] == pytest.approx(end)
    assert bool(plain and zero3 and (f_layers or b_layers)) == any(p.lane for p in comm)
    for s in (COMPUTE, COMM):    # parts are recorded in visiting order: stream order within a stream
        mine = [p for p in t.parts if min(p.stream, COMM) == s]
        assert len(mine) == len(comp if s == COMPUTE else comm)
        for i, p in enumerate(mine):
            assert (p.start, p.end) == pytest.approx(times[p.name, s, i]) and p.stretch == 1.0   # slowdown 1


def _dense(attn: float, mlp: float, w: float = 0.0) -> LayerCost:
    return LayerCost(attn, attn, w, mlp, mlp, w, False, 0.0, 0.0)


@given(st.integers(1, 6), st.floats(0.01, 5.0), st.floats(0.01, 5.0), st.floats(0.01, 5.0))
def test_zero3_gathers_a_layer_ahead_beside_the_layers(n, attn, mlp, gather):
    """A forward of n dense layers of c = ATTN + MLP seconds under ZeRO-3, each gather g on the
    data-parallel stream issued when the layer before starts: g + (n - 1) max(g, c) + c."""
    layers = [_dense(attn, mlp)] * n
    comp, comm = as_streams(forward_parts(layers, StageEnds(), zero3=True))
    assert [p.lane for p in comm] == [1] * n and [p.name for p in comm] == ["GATHER(F)"] * n
    t = _run(comp, comm, [0.0], comm_time=gather)
    c = attn + mlp
    assert t.end[0] == pytest.approx(gather + (n - 1) * max(gather, c) + c)
    assert t.compute_s[0] == pytest.approx(n * c) and t.comm_s[0] == pytest.approx(n * gather)
    assert {p.stream for p in t.parts} == {COMPUTE, DP_COMM}


def test_as_streams_keeps_every_field_but_the_dependencies():
    """Each part comes out on its own stream with what it carried (its shape, recompute flag,
    overlap side, own ratio beside communication, lane and tag); only ``after`` is the stream
    model's and ``needs`` is resolved into it."""
    chain = [Part(COMM, "G", shape="gather:dense", lane=1, tag="g0"),
             Part(COMPUTE, "A", 1.0, routed_share=0.5, recompute=True, beside=1.25, needs=("g0",)),
             Part(COMM, "AG", shape="tp_all_gather", overlap="next"), Part(COMPUTE, "B", 2.0)]
    comp, comm = as_streams(chain)
    assert [(p.stream, p.name, p.seconds, p.routed_share, p.recompute, p.beside) for p in comp] == [
        (COMPUTE, "A", 1.0, 0.5, True, 1.25), (COMPUTE, "B", 2.0, 0.0, False, 0.0)]
    assert [(p.stream, p.name, p.shape, p.overlap, p.lane, p.tag) for p in comm] == [
        (COMM, "G", "gather:dense", "", 1, "g0"), (COMM, "AG", "tp_all_gather", "next", 0, "")]
    assert comp[0].after == [(COMM, 0)] and comp[0].needs == () and comm[1].after == comp[1].after == [(COMPUTE, 0)]


def test_a_compute_part_shares_the_gpu_with_either_lane():
    """A data-parallel gather (0-3 s) launched before an all-to-all (0-0.5 s) outlasts it: the compute
    after the all-to-all (from 0.5 s) still runs beside the gather, 2x slower, on both walks."""
    comp, comm = as_streams([Part(COMM, "G", shape="gather:dense", lane=1), Part(COMM, "X", shape="dispatch"),
                             Part(COMPUTE, "A", 1.0), Part(COMPUTE, "P", 1.0)])
    plan = compile_plan(comp, comm)
    durations = compute_durations(plan, np.ones(1), 2.0)
    group = run_op(plan, np.zeros(2), compute_durations(plan, np.ones(2), 2.0), [3.0, 0.5], record=True)
    one = run_op_one(plan, 0.0, durations, [3.0, 0.5], record=True)
    for t in (group, one):
        assert [(p.name, p.start, p.end, p.stretch) for p in t.parts if p.stream == COMPUTE] == [
            ("A", 0.5, 2.5, 2.0), ("P", 2.5, 4.5, 2.0)]


def test_zero3_gathers_start_beside_the_embedding_and_the_heads():
    """The first two gathers are issued at the op's start, beside the embedding (forward) or the
    output heads (backward): an embedding of 2 s hides a gather of 1.5 s; heads of 1 s do not."""
    layer = _dense(1.0, 1.0, 1.0)
    comp, comm = as_streams(forward_parts([layer], StageEnds(embed_f=2.0), zero3=True))
    t = _run(comp, comm, [0.0], comm_time=1.5)
    assert [(p.name, p.start, p.end) for p in t.parts] == [
        ("GATHER(F)", 0, 1.5), ("EMBED(F)", 0, 2), ("ATTN(F)", 2, 3), ("MLP(F)", 3, 4)]
    comp, comm = as_streams(backward_parts([layer], StageEnds(head_i=0.5, head_w=0.5), with_w=True, zero3=True))
    t = _run(comp, comm, [0.0], comm_time=1.5)
    assert [(p.name, p.start) for p in t.parts][:4] == [("GATHER(B)", 0), ("HEAD(B)", 0), ("HEAD(W)", 0.5),
                                                        ("MLP(B)", 1.5)]


def test_zero3_backward_worked_by_hand():
    """Two dense layers, each MLP(B), MLP(W), ATTN(B), ATTN(W) of 1 s, gathers and scatters of 1.5 s
    on the data-parallel stream: GATHER 0-1.5 and 1.5-3 (both issued at the start); layer 1.5-5.5;
    its SCATTER 5.5-7 (the stream is free from 3); the next layer 5.5-9.5 (its weights since 3);
    its SCATTER 9.5-11, the op's end. With the compute slowed 2x beside a communication kernel, the
    first layer's MLP(B), which starts while the second gather runs, takes 2 s."""
    layers = [_dense(1.0, 1.0, 1.0)] * 2
    comp, comm = as_streams(backward_parts(layers, StageEnds(), with_w=True, zero3=True))
    t = _run(comp, comm, [0.0], comm_time=1.5)
    got = [(p.name, p.start, p.end) for p in t.parts if p.stream == DP_COMM]
    assert got == [("GATHER(B)", 0, 1.5), ("GATHER(B)", 1.5, 3), ("SCATTER(B)", 5.5, 7), ("SCATTER(B)", 9.5, 11)]
    compute = [(p.name, p.start, p.end) for p in t.parts if p.stream == COMPUTE]
    assert compute[0] == ("MLP(B)", 1.5, 2.5) and compute[3] == ("ATTN(W)", 4.5, 5.5)
    assert compute[4] == ("MLP(B)", 5.5, 6.5) and t.end[0] == 11
    slow = _run(comp, comm, [0.0], comm_time=1.5, slowdown=2.0)
    assert [(p.name, p.start, p.end, p.stretch) for p in slow.parts if p.stream == COMPUTE][0] == \
        ("MLP(B)", 1.5, 3.5, 2.0)


@given(st.lists(layers, min_size=1, max_size=3), st.lists(layers, min_size=1, max_size=3), ends, ends,
       st.lists(st.floats(0.01, 3.0), min_size=1, max_size=4), st.floats(0.0, 100.0), st.floats(0.2, 3.0),
       st.floats(1.0, 4.0), st.booleans(), st.booleans())
def test_one_gpu_walks_as_a_group_of_alike_gpus(f_layers, b_layers, f_ends, b_ends, comm_times, start, load,
                                                 slowdown, plain, zero3):
    """A group of one GPU is walked on Python floats: to the last bit what the vector walk gives
    each GPU of a group of two alike ones (SM sharing, recomputation, ZeRO-3's data-parallel stream
    and records included)."""
    if plain:
        comp, comm = as_streams(backward_parts(b_layers, b_ends, with_w=True, zero3=zero3)
                                + forward_parts(f_layers, f_ends, zero3=zero3))
    else:
        comp, comm = overlapped_parts(f_layers, b_layers, f_ends, b_ends)
    comp[0].recompute = True
    plan = compile_plan(comp, comm)
    times = [comm_times[k % len(comm_times)] for k in range(len(comm))]

    def walk(n):
        starts, loads = np.full(n, start), np.full(n, load)
        return run_op(plan, starts, compute_durations(plan, loads, slowdown), times, record=True)
    one, two = walk(1), walk(2)
    assert two.peer_wait_s.tolist() == [0.0, 0.0]       # alike GPUs never wait for each other
    for field in ("end", "compute_s", "comm_s", "recompute_s", "peer_wait_s"):
        assert getattr(one, field).tolist() == getattr(two, field).tolist()[:1]
        assert type(getattr(one, field)[0]) is np.float64
    assert one.parts == two.parts
    floats = run_op_one(plan, start, compute_durations(plan, np.full(1, load), slowdown), times, record=True)
    assert [getattr(floats, f) for f in ("end", "compute_s", "comm_s", "recompute_s")] == \
        [getattr(one, f)[0] for f in ("end", "compute_s", "comm_s", "recompute_s")]
    assert floats.parts == one.parts


@given(st.lists(layers, min_size=1, max_size=3), st.lists(layers, min_size=1, max_size=3), ends, ends,
       st.floats(0.01, 3.0), st.lists(st.floats(0.0, 5.0), min_size=2, max_size=4),
       st.lists(st.floats(0.2, 3.0), min_size=4, max_size=4), st.booleans())
def test_peer_waits_are_what_the_barriers_cost(f_layers, b_layers, f_ends, b_ends, comm_time, starts, loads, plain):
    """GPUs that start and load differently: each waits at a collective from its own launch to the
    group's last, so its communication time less its peer waits is the group's (every GPU leaves
    each collective together), and no wait is negative or longer than that GPU's communication."""
    if plain:
        comp, comm = as_streams(backward_parts(b_layers, b_ends, with_w=True) + forward_parts(f_layers, f_ends))
    else:
        comp, comm = overlapped_parts(f_layers, b_layers, f_ends, b_ends)
    t = _run(comp, comm, starts, load=loads[:len(starts)], slowdown=1.5, comm_time=comm_time)
    assert (t.peer_wait_s >= 0).all() and (t.peer_wait_s <= t.comm_s + 1e-9).all()
    assert t.comm_s - t.peer_wait_s == pytest.approx(np.full(len(starts), len(comm) * comm_time), rel=1e-9)


@given(st.integers(1, 6), st.floats(0.01, 5.0), st.floats(0.01, 5.0), st.floats(0.01, 5.0))
def test_a_gather_without_prefetch_blocks_its_layer(n, attn, mlp, gather):
    """Without prefetch (``zero3_collectives: per-tensor``, DeepSpeed's ZeRO-3 of 2021) each layer's
    gather sits on the op's own stream right before the layer: a forward of n layers of c = ATTN +
    MLP seconds lasts n (g + c), every gather exposed."""
    layers = [_dense(attn, mlp)] * n
    comp, comm = as_streams(forward_parts(layers, StageEnds(), zero3=True, prefetch=False))
    assert [(p.lane, p.name) for p in comm] == [(0, "GATHER(F)")] * n
    t = _run(comp, comm, [0.0], comm_time=gather)
    assert t.end[0] == pytest.approx(n * (gather + attn + mlp))
    assert t.compute_s[0] == pytest.approx(n * (attn + mlp)) and t.comm_s[0] == pytest.approx(n * gather)


def test_a_backward_without_prefetch_worked_by_hand():
    """Two dense layers, each MLP(B), MLP(W), ATTN(B), ATTN(W) of 1 s, gathers and scatters of 1.5 s,
    gathers blocking: GATHER 0-1.5; the first layer 1.5-5.5; its SCATTER 5.5-7 on the data-parallel
    stream, beside the second GATHER 5.5-7 on the op's own; the second layer 7-11; its SCATTER 11-12.5,
    the op's end. Compute slowed 2x beside a running communication kernel is not slowed here: no
    kernel runs beside either layer."""
    layers = [_dense(1.0, 1.0, 1.0)] * 2
    comp, comm = as_streams(backward_parts(layers, StageEnds(), with_w=True, zero3=True, prefetch=False))
    t = _run(comp, comm, [0.0], comm_time=1.5, slowdown=2.0)
    assert [(p.name, p.start, p.end) for p in t.parts if p.stream != COMPUTE] == [
        ("GATHER(B)", 0, 1.5), ("SCATTER(B)", 5.5, 7), ("GATHER(B)", 5.5, 7), ("SCATTER(B)", 11, 12.5)]
    compute = [(p.name, p.start, p.end) for p in t.parts if p.stream == COMPUTE]
    assert compute[0] == ("MLP(B)", 1.5, 2.5) and compute[4] == ("MLP(B)", 7, 8) and t.end[0] == 12.5
