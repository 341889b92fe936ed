"""validation.deepseek_profile and experiments.deepseek_profile: DeepSeek's published F&B-unit trace read by
hand-made traces, the shipped kernel table's figures, and the profile it feeds to the suite."""
import csv
import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from validation.deepseek_profile import (
    PHASES,
    ProfileDataError,
    busy_us,
    compute_profile,
    compute_stream_gaps_us,
    kernels_from_trace,
    kind_of,
    load_trace,
    mean_phase_us,
    phase_times,
    read_kernels,
    short_name,
    unit_span_us,
    write_compute_profile,
)


def kernel(name, ts, dur, stream, corr):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": corr}}


def launch(ts, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 1,
            "args": {"correlation": corr}}


def annotation(name, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur}


def hand_trace():
    """combine(B) then attn(F) on the host; a communication kernel on stream 27, two compute kernels
    overlapping on streams 7 and 23, one kernel launched outside every annotation."""
    return {"traceEvents": [
        annotation("combine(B)", 1000, 10), annotation("attn(F)", 1010, 20), annotation("ProfilerStep#1", 990, 100),
        launch(1001, 1), kernel("void dpsk::ep::internode::dispatch<false, 8>(int4*)", 2000, 300, 27, 1),
        launch(1011, 2), kernel("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>(x)",
                                2010, 100, 7, 2),
        launch(1012, 3),
        kernel("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_dptp128c_acc::GemmKernel>(x)",
               2060, 100, 23, 3),
        launch(1050, 4), kernel("rotary_kernel", 2400, 5, 7, 4),
    ]}


def test_a_hand_trace_becomes_kernel_rows_by_the_annotation_that_launched_them():
    rows = kernels_from_trace(hand_trace())
    assert [(r["turn"], r["phase"], r["stream"], r["kind"], r["start_us"], r["dur_us"]) for r in rows] == [
        (1, "combine(B)", 27, "communication", 0, 300),
        (1, "attn(F)", 7, "gemm", 10, 100),
        (1, "attn(F)", 23, "gemm-wgrad", 60, 100)]      # the rotary kernel: launched after every annotation
    times = phase_times(rows)
    assert times == {(1, "combine(B)"): 300, (1, "attn(F)"): 150}     # 2010-2160 once, the two streams overlap
    assert unit_span_us(rows) == 150
    assert compute_stream_gaps_us(rows) == []                  # one kernel on the busiest compute stream


def test_an_eleventh_annotation_opens_the_second_turn():
    events = []
    for i, name in enumerate(PHASES + ("combine(B)",)):
        events += [annotation(name, 100 * i, 50), launch(100 * i + 1, i),
                   kernel("rotary_kernel", 5000 + 10 * i, 5, 7, i)]
    rows = kernels_from_trace({"traceEvents": events})
    assert [r["turn"] for r in rows] == [1] * 10 + [2]
    with pytest.raises(ProfileDataError, match="no communication kernels"):
        phase_times(rows)


def test_gaps_between_kernels_on_the_busiest_compute_stream():
    """Kernels of 0-10, 12-17 and 30-31 us on stream 7 (one, overlapping, on 23; DeepEP's on 27): gaps 2
    and 13 us; an overlapping kernel on the same stream is no negative gap."""
    def row(stream, start, dur, kind="memory"):
        return {"turn": 1, "phase": "attn(F)", "stream": stream, "kind": kind, "kernel": "k", "start_us": start,
                "dur_us": dur}
    rows = [row(27, 0, 50, "communication"), row(7, 0, 10), row(7, 12, 5), row(7, 14, 1), row(7, 30, 1), row(23, 5, 30)]
    assert compute_stream_gaps_us(rows) == [2, 0, 13]


@pytest.mark.parametrize("trace, message", [
    ([], "no traceEvents list"), ({"traceEvents": []}, "has no GPU kernels"),
    ({"traceEvents": [kernel("k", 0, 1, 7, 1)]}, "has no annotations named combine"),
])
def test_what_is_not_deepseeks_trace_is_named(trace, message):
    with pytest.raises(ProfileDataError, match=message):
        kernels_from_trace(trace)


def test_a_missing_or_broken_trace_file_is_one_line(tmp_path):
    with pytest.raises(ProfileDataError, match="does not exist .*profile-data"):
        load_trace(tmp_path / "train.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ProfileDataError, match="is not a JSON trace"):
        load_trace(tmp_path / "bad.json")
    (tmp_path / "ok.json").write_text(json.dumps(hand_trace()))
    assert len(kernels_from_trace(load_trace(tmp_path / "ok.json"))) == 3


@pytest.mark.parametrize("name, kind", [
    ("void dpsk::ep::internode::cached_notify<false>(int)", "communication"),
    ("void cutlass::device_kernel<flash::FlashAttnBwd<x>>(y)", "attention"),
    ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::m_grouped_fp8_ptp128c::GemmKernel>(d)", "gemm-experts"),
    ("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_dptp128c_acc::GemmKernel>(d)", "gemm-wgrad"),
    ("void dpsk::grouped_gemm::cuda::utils::transpose<512, 128, 4, 4>(unsigned char const*)", "memory"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64", "gemm"),
    ("void layer_norm::ln_fwd_kernel<layer_norm::Kernel_traits<a, b>>(p)", "memory"),
])
def test_kinds_of_kernels(name, kind):
    assert kind_of(name) == kind


def test_short_names_drop_templates_and_parameters():
    assert short_name("void layer_norm::ln_fwd_kernel<layer_norm::Kernel_traits<a, b>, 4>(p, q)") == \
        "layer_norm::ln_fwd_kernel"
    assert short_name("rotary_kernel") == "rotary_kernel"


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 100)), max_size=30))
def test_busy_time_is_the_union(pairs):
    """Never more than the sum of the lengths, never less than the longest; the length of each integer
    microsecond covered, counted once."""
    intervals = [(a, a + d) for a, d in pairs]
    covered = {t for a, b in intervals for t in range(a, b)}
    assert busy_us(intervals) == len(covered)
    assert max((b - a for a, b in intervals), default=0) <= busy_us(intervals) <= sum(b - a for a, b in intervals)


def test_the_shipped_table_gives_the_figures_docs_quote():
    """DeepSeek's unit: 983 GPU operations over 4 turns; per layer attn(B) 9.34 ms, mlp(W) 5.06 ms (its
    two weight-gradient streams counted once), the unit 128.5 ms; the profile's parts sum to 31.07 ms."""
    rows = read_kernels()
    assert len(rows) == 983 and {r["turn"] for r in rows} == {1, 2, 3, 4}
    mean = mean_phase_us(rows)
    assert mean["attn(B)"] == pytest.approx(9340.75) and mean["mlp(W)"] == pytest.approx(5062.75)
    assert unit_span_us(rows) == pytest.approx(128537)
    profile = {r["part"]: r["seconds"] for r in compute_profile(rows)}
    assert sum(profile.values()) == pytest.approx(31.07e-3, abs=1e-5) and profile["attn_r"] == 0


def test_the_profile_is_read_by_the_chunk_model_at_its_measured_time_beside_communication(tmp_path):
    from sim.training.costs.chunk import read_profile, read_profile_beside
    path = write_compute_profile(tmp_path / "p.csv")
    assert read_profile(str(path))["moe"]["attn_i"] == pytest.approx(9.34075e-3)
    assert read_profile_beside(str(path)) == {"moe": {p: 1.0 for p in (
        "attn_f", "mlp_f", "attn_i", "mlp_i", "attn_w", "mlp_w", "attn_r", "mlp_r")}}


@pytest.mark.parametrize("row, message", [
    ("1,attn(F),7,gemm,x,0,abc", "k.csv row 2: needs turn"),
    ("1,attn(X),7,gemm,x,0,1", "phase must be one of combine\\(B\\).*got 'attn\\(X\\)'"),
])
def test_a_bad_kernel_row_is_named(tmp_path, row, message):
    path = tmp_path / "k.csv"
    path.write_text(f"# a comment\nturn,phase,stream,kind,kernel,start_us,dur_us\n{row}\n")
    with pytest.raises(ProfileDataError, match=message):
        read_kernels(path)


def test_the_experiment_writes_both_tables_with_the_figures_docs_quote(tmp_path, capsys):
    """``python -m experiments.deepseek_profile``: the unit 128.5 ms measured, 99.8 simulated (110.0 on the
    GEMMs DeepSeek-V3 trained with); DeepEP's dispatch(F) 3.0x the simulated; weight-gradient GEMMs 2.2x
    (1.85x) and memory-bound kernels 2.0x the kernel model's alone times, expert GEMMs 1.07x on the 2024 GEMMs."""
    from experiments.deepseek_profile import main
    assert main(["--out", str(tmp_path)]) == 0
    parts = {r["part"]: r for r in csv.DictReader(io.StringIO((tmp_path / "deepseek_profile_parts.csv").read_text()))}
    kinds = {r["kind"]: r for r in csv.DictReader(io.StringIO((tmp_path / "deepseek_profile_kernels.csv").read_text()))}
    assert float(parts["unit"]["measured_ms"]) == pytest.approx(128.537)
    assert float(parts["unit"]["simulated_ms"]) == pytest.approx(99.80, abs=0.01)
    assert float(parts["unit"]["simulated_2024_ms"]) == pytest.approx(109.98, abs=0.01)
    assert float(kinds["gemm-wgrad"]["ratio_2024"]) == pytest.approx(1.85, abs=0.005)
    assert float(kinds["gemm-experts"]["ratio_2024"]) == pytest.approx(1.07, abs=0.005)
    assert float(parts["dispatch(F)"]["ratio"]) == pytest.approx(3.00, abs=0.005)
    assert float(kinds["gemm-wgrad"]["ratio"]) == pytest.approx(2.20, abs=0.005)
    assert float(kinds["memory"]["ratio"]) == pytest.approx(1.98, abs=0.005)
    out = capsys.readouterr().out
    assert "the compute stream's gaps between kernels: 905 under 20 us (median 2.0 us), 21 longer (8.5 ms)" in out


def test_the_experiment_transcribes_a_trace_and_compares_that_one(tmp_path, capsys):
    """``--trace``: the hand trace's 3 kernels written to OUT/deepseek_v3_kernels.csv (the shipped table
    untouched) and compared; its unit 150 us."""
    from experiments.deepseek_profile import main
    from validation.deepseek_profile import KERNELS_CSV
    shipped = KERNELS_CSV.read_bytes()
    trace = tmp_path / "train.json"
    trace.write_text(json.dumps(hand_trace()))
    assert main(["--trace", str(trace), "--out", str(tmp_path)]) == 0
    assert len(read_kernels(tmp_path / "deepseek_v3_kernels.csv")) == 3 and KERNELS_CSV.read_bytes() == shipped
    parts = {r["part"]: r for r in csv.DictReader(io.StringIO((tmp_path / "deepseek_profile_parts.csv").read_text()))}
    assert float(parts["unit"]["measured_ms"]) == pytest.approx(0.150)
    assert "wrote " + str(tmp_path / "deepseek_v3_kernels.csv") + ": 3 kernels" in capsys.readouterr().out



def test_a_missing_trace_is_one_line_and_exit_2(tmp_path, capsys):
    from experiments.deepseek_profile import main
    assert main(["--trace", str(tmp_path / "train.json"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "train.json does not exist" in err and "Traceback" not in err
