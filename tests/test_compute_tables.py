"""sim.compute.tables: kernel tables read row by row, each refusal one whole line naming the file,
the line and what is allowed."""
from pathlib import Path

import pytest

from sim.compute.tables import (
    TABLES,
    AttentionRow,
    GemmRow,
    KernelTableError,
    read_attention_table,
    read_gemm_table,
    table_path,
)

PEAKS = {"h100": {"bf16": 989.5, "fp8": 1979.0, "mxfp8": 0.0}, "a100": {"bf16": 312.0, "fp8": 0.0}}
G = "gpu,precision,groups,m,n,k,tflops\n"
A = "gpu,kernel,direction,causal,head_dim,seq_len,tflops\n"


def test_a_gemm_table_reads_its_rows_with_their_lines(tmp_path):
    p = tmp_path / "g.csv"
    p.write_text("# source: a hand-made table\n" + G + "\n h100 , bf16 ,1,4096,4096,4096,700.5\n   # an indented note\n"
                 "h100,fp8,8,512,2048,7168,1200\n")
    rows = read_gemm_table(p, PEAKS)
    assert rows == [GemmRow("h100", "bf16", 1, 4096, 4096, 4096, 700.5, 4),
                    GemmRow("h100", "fp8", 8, 512, 2048, 7168, 1200.0, 6)]
    assert all(isinstance(v, int) for v in rows[1][2:6])
    assert rows[1].flops == 2.0 * 8 * 512 * 2048 * 7168
    assert rows[1].seconds == pytest.approx(2.0 * 8 * 512 * 2048 * 7168 / 1200e12, rel=1e-15)


def test_an_attention_table_reads_its_rows_with_their_lines(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text(A + "h100,flash3,fwd,1,128,8192,600\nh100, flash3 ,bwd,0,64,512,989.5\n")
    assert read_attention_table(p, PEAKS) == [AttentionRow("h100", "flash3", "fwd", 1, 128, 8192, 600.0, 2),
                                              AttentionRow("h100", "flash3", "bwd", 0, 64, 512, 989.5, 3)]


def test_a_table_is_found_by_its_shipped_name_or_its_own_path(tmp_path, monkeypatch):
    assert table_path("gemm_sm90.csv") == TABLES / "gemm_sm90.csv"
    assert table_path(tmp_path / "mine.csv") == tmp_path / "mine.csv"            # absolute
    assert table_path("tables/mine.csv") == Path("tables/mine.csv")            # a path with a folder
    monkeypatch.chdir(tmp_path)
    (tmp_path / "here.csv").write_text(G)
    assert table_path("here.csv") == Path("here.csv")                          # a file in the working folder


@pytest.mark.parametrize("text,message", [
    ("gpu,precision,m,n,k,tflops\nh100,bf16,1,1,1,1\n",
     "line 1: missing column(s) groups; expected gpu, precision, groups, m, n, k, tflops"),
    ("gpu,precision,m,n,tflops\nh100,bf16,1,1,1\n",
     "line 1: missing column(s) groups, k; expected gpu, precision, groups, m, n, k, tflops"),
    (G + "h100,bf16,1,256,256,256,\n", "line 2: tflops '' is not a number"),
    (G + ",bf16,1,256,256,256,5\n", "line 2: gpu '' is not a GPU preset (allowed: a100, h100)"),
    (G + "h100,,1,256,256,256,5\n", "line 2: precision must be one of bf16, fp8, mxfp8, got ''"),
    (G + "a100,mxfp8,1,256,256,256,5\n", "line 2: GPU a100 has no mxfp8 tensor cores"),
    (G + "h100,bf16,1,256,256,256," + "9" * 200_000 + "\n",
     ": not a readable CSV (field larger than field limit (131072))"),
    (G + "h100,bf16,1,256,256,256,x\n", "line 2: tflops 'x' is not a number"),
    (G + "h100,bf16,1,0,256,256,5\n", "line 2: m must be an integer in [1, 1,000,000,000], got 0"),
    (G + "h100,bf16,1,256,256,256,2e6\n", "line 2: tflops must be a finite number in (0, 1,000,000], got 2000000.0"),
    (G + "h10,bf16,1,256,256,256,5\n", "line 2: gpu 'h10' is not a GPU preset (allowed: a100, h100); did you mean "
                                       "'h100'?"),
    (G + "h100,fp16,1,256,256,256,5\n", "line 2: precision must be one of bf16, fp8, mxfp8, got 'fp16'"),
    (G + "a100,fp8,1,256,256,256,5\n", "line 2: GPU a100 has no fp8 tensor cores"),
    (G + "h100,mxfp8,1,256,256,256,5\n", "line 2: GPU h100 has no mxfp8 tensor cores"),
    (G + "h100,bf16,1,256,256,256,1000\n", "line 2: 1000 TFLOPS is above h100's dense bf16 peak of 989.5 TFLOPS "
                                           "(allowed: at most the peak)"),
    (G + "h100,bf16,2,256,512,1024,5\n\n# c\nh100,bf16,2,256,512,1024,6\n",
     "line 5: duplicate shape gpu=h100 precision=bf16 groups=2 m=256 n=512 k=1024 (first on line 2)"),
    ("# only\n\n", ": no header and no rows; expected columns gpu, precision, groups, m, n, k, tflops"),
])
def test_a_bad_gemm_table_is_one_whole_line(tmp_path, text, message):
    p = tmp_path / "t.csv"
    p.write_text(text)
    with pytest.raises(KernelTableError) as info:
        read_gemm_table(p, PEAKS)
    sep = "" if message.startswith(":") else " "
    assert str(info.value) == f"kernel table {p}{sep}{message}"


def test_a_row_at_the_peak_is_allowed(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(G + "h100,bf16,1,256,256,256,989.5\n" + "h100,bf16,1,256,256,512,0.001\n")
    assert [r.tflops for r in read_gemm_table(p, PEAKS)] == [989.5, 0.001]


@pytest.mark.parametrize("row,message", [
    ("h100,,fwd,0,128,512,300", "line 2: kernel must name the attention kernel (flash2, flash3, ...), got ''"),
    ("h100,flash3,up,0,128,512,300", "line 2: direction must be one of fwd, bwd, got 'up'"),
    ("h100,flash3,fwd,2,128,512,300", "line 2: causal must be an integer in [0, 1], got 2"),
    ("h100,flash3,fwd,1,5000,512,300", "line 2: head_dim must be an integer in [1, 4,096], got 5000"),
    ("h100,flash3,fwd,1,128,0,300", "line 2: seq_len must be an integer in [1, 1,000,000,000], got 0"),
    ("h100,flash3,fwd,1,128,512,0", "line 2: tflops must be a finite number in (0, 1,000,000], got 0.0"),
    ("h100,flash3,fwd,0,128,512,990", "line 2: 990 TFLOPS is above h100's dense bf16 peak of 989.5 TFLOPS "
                                      "(allowed: at most the peak)"),
    ("b300,flash3,fwd,0,128,512,300", "line 2: gpu 'b300' is not a GPU preset (allowed: a100, h100)"),
    ("h100,flash3,fwd,1,128,512,300\nh100,flash3,fwd,1,128,512,301",
     "line 3: duplicate row h100 flash3 fwd causal=1 head_dim=128 seq_len=512 (first on line 2)"),
])
def test_a_bad_attention_table_is_one_whole_line(tmp_path, row, message):
    p = tmp_path / "att.csv"
    p.write_text(A + row + "\n")
    with pytest.raises(KernelTableError) as info:
        read_attention_table(p, PEAKS)
    assert str(info.value) == f"kernel table {p} {message}"


def test_the_same_shape_in_another_direction_mask_or_kernel_is_no_duplicate(tmp_path):
    p = tmp_path / "att.csv"
    p.write_text(A + "h100,flash3,fwd,1,128,512,300\nh100,flash3,bwd,1,128,512,300\nh100,flash3,fwd,0,128,512,300\n"
                 "h100,flash2,fwd,1,128,512,300\nh100,flash3,fwd,1,64,512,300\nh100,flash3,fwd,1,128,1024,300\n")
    assert len(read_attention_table(p, PEAKS)) == 6


def test_a_missing_or_unreadable_table_is_one_line(tmp_path):
    with pytest.raises(KernelTableError) as info:
        read_gemm_table(tmp_path / "none.csv", PEAKS)
    assert str(info.value) == f"kernel table {tmp_path / 'none.csv'}: no such file"
    p = tmp_path / "bin.csv"
    p.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(KernelTableError) as info:
        read_attention_table(p, PEAKS)
    assert str(info.value).startswith(f"kernel table {p}: cannot read it as UTF-8 text ('utf-8' codec can't decode")
