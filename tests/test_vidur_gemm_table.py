"""tools.vidur_gemm_table: Vidur's profiled linear layers as GEMM shapes, and the table it wrote."""
import io
from collections import namedtuple
from contextlib import redirect_stdout

import pandas as pd
import pytest

from sim.compute.device import peaks_of
from sim.compute.tables import TABLES, read_gemm_table
from sim.training.model.specs import load_gpu
from tools import vidur_gemm_table as vidur

Row = namedtuple("Row", "n_head n_kv_head n_embd n_expanded_embd use_gated_mlp num_tokens num_tensor_parallel_workers")
OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")


def test_the_shapes_of_llama_2_70b_at_tp2_by_hand():
    """h 8192, 64 heads of 128, 8 KV heads, FFN 28672 gated, 1,024 tokens over TP 2."""
    got = vidur.shapes(Row(64, 8, 8192, 28672, "True", 1024, 2))
    assert got == {"attn_pre_proj": (1024, (64 + 16) * 128 // 2, 8192), "attn_post_proj": (1024, 8192, 4096),
                   "mlp_up_proj": (1024, 28672, 8192), "mlp_down_proj": (1024, 8192, 14336)}
    assert vidur.shapes(Row(32, 32, 4096, 11008, "False", 256, 1))["mlp_up_proj"] == (256, 11008, 4096)


def _profile(folder, model, rows):
    columns = [f"time_stats.{op}.{stat}" for op in OPS for stat in ("min", "median")]
    frame = pd.DataFrame([{**{c: 0.0 for c in columns}, **r} for r in rows])
    path = folder / "data/profiling/compute/a100" / model / "mlp.csv"
    path.parent.mkdir(parents=True)
    frame.to_csv(path, index=False)


def test_rows_are_the_median_of_the_models_that_share_a_shape(tmp_path, monkeypatch):
    model = dict(n_head=32, n_kv_head=32, n_embd=4096, n_expanded_embd=11008, use_gated_mlp=True,
                 num_tensor_parallel_workers=1)
    times = {f"time_stats.{op}.median": ms for op, ms in zip(OPS, (1.0, 0.5, 2.0, 1.5))}
    _profile(tmp_path, "a/one", [{**model, **times, "num_tokens": 4096}, {**model, **times, "num_tokens": 100}])
    slower = {k: 3 * v for k, v in times.items()}
    _profile(tmp_path, "b/two", [{**model, **slower, "num_tokens": 4096}])
    _profile(tmp_path, "c/three", [{**model, **slower, "num_tokens": 4096}])
    monkeypatch.setattr(vidur, "MODELS", ("a/one", "b/two", "c/three"))
    rows = vidur.table_rows(tmp_path, "a100")
    assert len(rows) == 4                                   # 100 tokens is not in TOKENS; one row per shape
    m, n, k, tflops = rows[0]
    assert (m, n, k) == (4096, 4096, 4096)                  # attn_post_proj: 0.5 ms once, 1.5 ms twice
    assert tflops == pytest.approx(2 * 4096 ** 3 / 1.5e-3 / 1e12, rel=1e-12)


@pytest.mark.parametrize("gpu", ["a100", "h100"])
def test_the_shipped_tables_read_as_kernel_tables(gpu):
    rows = read_gemm_table(TABLES / f"gemm_vidur_{gpu}.csv", peaks_of({gpu: load_gpu(gpu).figures()}))
    assert len(rows) == 336 and {r.gpu for r in rows} == {gpu} and min(r.m for r in rows) == 256
    text = (TABLES / f"gemm_vidur_{gpu}.csv").read_text()
    assert "github.com/microsoft/vidur" in text and "never a\n# validation row" in text


def test_main_writes_a_table_that_reads_back(tmp_path, monkeypatch):
    model = dict(n_head=32, n_kv_head=32, n_embd=4096, n_expanded_embd=11008, use_gated_mlp=True,
                 num_tensor_parallel_workers=2, num_tokens=1024)
    _profile(tmp_path, "a/one", [{**model, **{f"time_stats.{op}.median": 1.0 for op in OPS}}])
    monkeypatch.setattr(vidur, "MODELS", ("a/one",))
    out = io.StringIO()
    with redirect_stdout(out):
        assert vidur.main([str(tmp_path), "a100"]) == 0
    table = tmp_path / "t.csv"
    table.write_text(out.getvalue())
    rows = read_gemm_table(table, peaks_of({"a100": load_gpu("a100").figures()}))
    assert [(r.m, r.n, r.k) for r in rows] == [(1024, 4096, 2048), (1024, 4096, 5504), (1024, 6144, 4096),
                                                (1024, 11008, 4096)]


def test_a_folder_without_vidurs_profiles_is_one_line(tmp_path, capsys):
    assert vidur.main([str(tmp_path), "a100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no data/profiling/compute/a100/<model>/mlp.csv for meta-llama/Llama-2-7b-hf" in err[0]
    with pytest.raises(SystemExit):
        vidur.main([str(tmp_path), "v100"])
