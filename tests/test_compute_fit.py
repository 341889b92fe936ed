"""sim.compute.tables, sim.compute.fit and ``python -m sim calibrate --kernels``: the declared
calibration set read and checked, the shipped fit reproduced by a fresh one, each table reproduced
within the error it prints, a user's own table fitted into a family a run can use, and bad tables
refused in one line naming the file and the row."""
import numpy as np
import pytest
import yaml
from test_outputs import cli

from sim.compute import KernelModel, load_families
from sim.compute.attention import AttentionFit
from sim.compute.fit import attention_flops, calibrate, gemm_row_seconds
from sim.compute.gemm import GemmFit
from sim.compute.tables import KernelTableError, read_attention_table, read_gemm_table
from sim.training.model.specs import gpu_names, load_gpu, load_scenario


@pytest.fixture(scope="module")
def gpus():
    return {n: load_gpu(n).figures() for n in gpu_names()}


@pytest.fixture(scope="module")
def fresh(gpus):
    return calibrate(gpus)


def test_the_shipped_fit_is_what_the_declared_set_gives(fresh):
    """kernels.yaml is calibrate()'s output (written by `calibrate --kernels --write`), to its digits."""
    fitted, _ = fresh
    shipped = load_families()
    assert list(shipped) == list(fitted)
    for name, fam in fitted.items():
        for precision, fit in fam["gemm"].items():
            for key in ("rate_tflops", "k0", "fixed_us"):
                assert shipped[name]["gemm"][precision][key] == pytest.approx(fit[key], rel=1e-3, abs=1e-3), \
                    (name, precision, key)
        for key, fit in fam["attention"]["fits"].items():
            for p in ("rate_tflops", "s0", "d0"):
                assert shipped[name]["attention"]["fits"][key][p] == pytest.approx(fit[p], rel=1e-3, abs=1e-3)


def test_each_table_is_reproduced_within_its_printed_error(fresh, gpus):
    """Every row of every declared table, timed by the shipped fit, is within the worst error the
    fit prints for that table, and the rms over the table is the printed rms."""
    _, report = fresh
    families = load_families()
    peaks = {n: dict(g.peak_tflops) for n, g in gpus.items()}
    assert report
    for r in report:
        fam = families[r.family]
        if r.kind.startswith("gemm"):
            precision = r.kind.split()[1]
            fit = GemmFit(**fam["gemm"][precision])
            rows = [x for x in read_gemm_table(r.table, peaks) if x.gpu in fam["gpus"] and x.precision == precision]
            err = np.abs(gemm_row_seconds(fit, rows, gpus) / [x.seconds for x in rows] - 1) * 100
        else:
            _, kernel, direction, *causal = r.kind.split()
            att = fam["attention"] if kernel == fam["attention"]["kernel"] else fam["attention"]["also"][kernel]
            fit = AttentionFit(**att["fits"][f"{direction}_{1 if causal else 0}"])
            rows = [x for x in read_attention_table(r.table, peaks) if x.kernel == kernel and x.direction == direction
                    and x.causal == (1 if causal else 0)]
            flops = attention_flops(rows)
            measured = flops / (np.array([x.tflops for x in rows]) * 1e12)
            err = np.abs(fit.seconds(flops, [x.seq_len for x in rows], [x.head_dim for x in rows]) / measured - 1) * 100
        assert len(rows) == r.rows
        assert err.max() <= r.max_pct + 0.01 and np.sqrt(np.mean(err ** 2)) == pytest.approx(r.rms_pct, abs=0.01)


def test_a_family_that_borrows_scales_by_the_best_measured_gemms(fresh):
    """A100 has no shape table: sm90's fit, its rate times MAMF's A100 / H100 ratio (271.2 / 794.5)."""
    fitted, _ = fresh
    assert fitted["sm80"]["gemm"]["bf16"]["rate_tflops"] == pytest.approx(
        fitted["sm90"]["gemm"]["bf16"]["rate_tflops"] * 271.2 / 794.5, rel=1e-4)
    assert fitted["sm80"]["gemm"]["bf16"]["k0"] == fitted["sm90"]["gemm"]["bf16"]["k0"]
    # A100's FlashAttention-2: FA2-on-H100's curve at 73% of the A100's peak at 16K tokens, head 128
    a100 = KernelModel(load_gpu("a100").figures())
    assert a100.family.attention.rate("fwd", False, 16384, 128) == pytest.approx(0.73 * 312e12, rel=1e-9)


def test_fp8_rows_above_the_peak_are_refused(tmp_path):
    """XLA's sm_90 FP8 rows reach 2,424 TFLOPS, above the H100's 1,979: such a table is refused
    (which is why the declared set takes its H100 FP8 fit from DeepGEMM and MAMF)."""
    p = tmp_path / "t.csv"
    p.write_text("# a comment\ngpu,precision,groups,m,n,k,tflops\nh100,fp8,1,4096,4096,4096,2424.0\n")
    peaks = {"h100": {"bf16": 989.0, "fp8": 1979.0}}
    with pytest.raises(KernelTableError, match=r"t.csv line 3: 2424 TFLOPS is above h100's dense fp8 peak of 1979"):
        read_gemm_table(p, peaks)


@pytest.mark.parametrize("text,message", [
    ("gpu,precision,m,n,k,tflops\nh100,bf16,1,1,1,1\n", r"line 1: missing column\(s\) groups"),
    ("gpu,precision,groups,m,n,k,tflops\nh100,bf16,1,256,256,256,0\n", r"line 2: tflops must be a finite number in \(0"),
    ("gpu,precision,groups,m,n,k,tflops\nh100,bf16,1,256,256,256,-3\n", r"line 2: tflops must be"),
    ("gpu,precision,groups,m,n,k,tflops\nh100,bf16,1,256,256,256,x\n", r"line 2: tflops 'x' is not a number"),
    ("gpu,precision,groups,m,n,k,tflops\nh100,bf16,1,0,256,256,5\n", r"line 2: m must be an integer"),
    ("gpu,precision,groups,m,n,k,tflops\nh100,bf16,1,256,256,256,5\nh100,bf16,1,256,256,256,6\n",
     r"line 3: duplicate shape .* \(first on line 2\)"),
    ("gpu,precision,groups,m,n,k,tflops\nh1000,bf16,1,256,256,256,5\n", r"line 2: gpu 'h1000' is not a GPU preset"),
    ("gpu,precision,groups,m,n,k,tflops\na100,fp8,1,256,256,256,5\n", r"line 2: GPU a100 has no fp8 tensor cores"),
    ("gpu,precision,groups,m,n,k,tflops\nh100,fp16,1,256,256,256,5\n", r"line 2: precision must be one of bf16"),
    ("# only comments\n", r"no header and no rows"),
])
def test_bad_gemm_tables_are_one_line(tmp_path, gpus, text, message):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    peaks = {n: dict(g.peak_tflops) for n, g in gpus.items()}
    with pytest.raises(KernelTableError, match=message) as exc:
        read_gemm_table(p, peaks)
    assert "\n" not in str(exc.value) and "bad.csv" in str(exc.value)


def test_bad_attention_tables_are_one_line(tmp_path, gpus):
    peaks = {n: dict(g.peak_tflops) for n, g in gpus.items()}
    head = "gpu,kernel,direction,causal,head_dim,seq_len,tflops\n"
    for row, message in (("h100,flash3,sideways,0,128,512,300", "direction must be one of fwd, bwd"),
                         ("h100,flash3,fwd,2,128,512,300", "causal must be an integer in \\[0, 1\\]"),
                         ("h100,flash3,fwd,0,128,512,1200", "1200 TFLOPS is above h100's dense bf16 peak"),
                         ("h100,,fwd,0,128,512,300", "kernel must name the attention kernel")):
        p = tmp_path / "att.csv"
        p.write_text(head + row + "\n")
        with pytest.raises(KernelTableError, match=message):
            read_attention_table(p, peaks)


def test_calibrate_kernels_prints_each_tables_error():
    rc, out, err = cli(["calibrate", "--kernels"])
    assert rc == 0, err
    assert "gemm_xla_sm90_bf16.csv" in out and "gemm_deepgemm_h800_fp8.csv" in out and "worst_error_pct" in out
    assert "sm80 (a100): bf16: rate 291.4 TFLOPS" in out


def test_a_users_table_makes_a_family_a_run_uses(tmp_path):
    """A user's own GEMM table (here: XLA's H100 rows at 90% of their throughput, as if measured on a
    slower machine) fitted into family `mine`; a GPU of their own naming it runs slower GEMMs."""
    from sim.compute.tables import TABLES
    lines = (TABLES / "gemm_xla_sm90_bf16.csv").read_text().splitlines()
    rows = [lines[i] for i in range(len(lines)) if not lines[i].startswith("#")]
    slower = [rows[0]] + [",".join(r.split(",")[:-1] + [f"{0.9 * float(r.split(',')[-1]):.3f}"]) for r in rows[1:]]
    table = tmp_path / "mine.csv"
    table.write_text("\n".join(slower) + "\n")
    out = tmp_path / "mine.yaml"
    rc, text, err = cli(["calibrate", "--kernels", str(table), "--family", "mine", "--out", str(out)])
    assert rc == 0, err
    fams = yaml.safe_load(out.read_text())
    assert list(fams)[0] == "mine" and fams["mine"]["gpus"] == ["h100"]
    assert fams["mine"]["gemm"]["bf16"]["rate_tflops"] == pytest.approx(0.9 * fams["sm90"]["gemm"]["bf16"]["rate_tflops"],
                                                                        rel=0.02)
    gpu = tmp_path / "my-h100.yaml"
    gpu.write_text("sms: 132\nbf16_tflops: 989\nfp8_tflops: 1979\nhbm_gb: 80\nhbm_tbps: 3.35\nkernel_family: mine\n")
    run = dict(gpu=str(gpu), topology="h800-16", model="llama3-8b", pp=1, ep=1, dp=1, schedule="1f1b", microbatches=1)
    from sim.training.scenario import Scenario
    base = load_scenario("tiny", **run, compute_model="kernels")
    own = Scenario(base.with_(compute_kernels=str(out)))
    shipped = Scenario(base.with_(gpu="h100"))
    assert own.chunk.kernels.family.name == "mine" and "mine" in own.chunk.compute_label
    layer_own, layer_shipped = own.chunk.stage_layers[0][0], shipped.chunk.stage_layers[0][0]
    assert layer_own.attn_w > layer_shipped.attn_w           # its weight-gradient GEMMs are slower


def test_calibrate_kernels_refusals(tmp_path):
    assert cli(["calibrate", "--kernels", str(tmp_path / "x.csv")])[0] == 2       # no --family
    rc, _, err = cli(["calibrate", "--kernels", str(tmp_path / "x.csv"), "--family", "sm90"])
    assert rc == 2 and "shipped family" in err
    rc, _, err = cli(["calibrate"])
    assert rc == 2 and "--kernels for the compute kernels" in err


def test_the_measuring_script_writes_tables_calibrate_reads(tmp_path, gpus, monkeypatch, capsys):
    """tools/measure_kernels.py (an optional extra, needs PyTorch and a GPU): its writer's tables are
    read back by the calibration's readers; without PyTorch it says so in one line."""
    from tools import measure_kernels as mk
    paths = mk.write_tables(str(tmp_path / "mine"), "h100", ["measured by a test"],
                            [("bf16", 1, 256, 256, 256, 6.5), ("fp8", 1, 4096, 4096, 4096, 1200.0)],
                            [("torch-flash", "fwd", 0, 128, 4096, 600.0)])
    peaks = {n: dict(g.peak_tflops) for n, g in gpus.items()}
    assert [r.tflops for r in read_gemm_table(paths[0], peaks)] == [6.5, 1200.0]
    assert read_attention_table(paths[1], peaks)[0].kernel == "torch-flash"
    assert len(mk.gemm_shapes()) == 6 ** 3 and mk.attention_flops("bwd", 1, 1024) == 2.5 * 0.5 * 4 * 1024 * 16384 * 2048
    monkeypatch.setitem(__import__("sys").modules, "torch", None)
    assert mk.main(["--gpu", "h100", "--out", str(tmp_path / "x")]) == 2
    assert "needs PyTorch with CUDA" in capsys.readouterr().err


def test_a_family_fits_its_other_kernels_only_from_its_own_table(gpus, tmp_path):
    """sm90 fits FlashAttention-2 beside its FlashAttention-3 (``also``), each to the table's rows of
    that kernel; ``also`` on a family that borrows another's attention, or naming a kernel the table
    lacks, is refused in one line."""
    from sim.checks import InputError
    families = load_families()
    assert families["sm90"]["attention"]["kernel"] == "flash3"
    assert set(families["sm90"]["attention"]["also"]) == {"flash2"}
    assert "also" not in families["sm80"]["attention"]
    base = yaml.safe_load(open("sim/compute/presets/calibration.yaml"))
    sm90 = {"sm90": base["families"]["sm90"]}
    bad = {"families": {**sm90, "sm80": {"gpus": ["a100"], "gemm": base["families"]["sm80"]["gemm"],
                                         "attention": {"from": "sm90", "kernel": "flash2", "also": ["flash3"],
                                                       "best_forward_peak_fraction": 0.73}}}}
    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(InputError, match="family sm80: `also` needs the family's own attention table"):
        calibrate(gpus, path)
    sm90["sm90"] = {**sm90["sm90"], "attention": {**sm90["sm90"]["attention"], "also": ["flash9"]}}
    path.write_text(yaml.safe_dump({"families": sm90}))
    with pytest.raises(InputError, match="family sm90: attention_flash_h100.csv has no rows of kernel 'flash9'"):
        calibrate(gpus, path)


def test_a_gemm_fit_reports_its_own_rms_and_worst_error(gpus):
    """Rows made by a known fit and then moved by +-8%: the fit's record names its source and row
    count, and its rms and worst |error| are what its own parameters give on those rows."""
    from sim.compute.fit import fit_gemm
    from sim.compute.tables import GemmRow
    truth = GemmFit(rate_tflops=700.0, k0=200.0, fixed_us=6.0)
    shapes = [(1, m, n, k) for m in (256, 2048, 8192) for n in (1024, 8192) for k in (512, 4096)]
    rows = [GemmRow("h100", "bf16", *s, 1.0, i) for i, s in enumerate(shapes, start=1)]
    seconds = gemm_row_seconds(truth, rows, gpus) * np.array([1.08 if i % 2 else 0.92 for i in range(len(rows))])
    rows = [r._replace(tflops=r.flops / t / 1e12) for r, t in zip(rows, seconds)]
    fit = fit_gemm(rows, gpus, "synthetic")
    err = np.abs(gemm_row_seconds(fit, rows, gpus) / np.array([r.seconds for r in rows]) - 1) * 100
    assert (fit.source, fit.rows) == ("synthetic", len(rows))
    assert fit.max_pct == pytest.approx(err.max(), abs=0.05) and fit.max_pct > 5
    assert fit.rms_pct == pytest.approx(np.sqrt(np.mean(err ** 2)), abs=0.05) and fit.rms_pct < fit.max_pct


def test_a_tables_kind_is_read_from_its_columns(tmp_path):
    from sim.compute.fit import table_kind
    gemm, att, other = tmp_path / "g.csv", tmp_path / "a.csv", tmp_path / "o.csv"
    gemm.write_text("# mine\ngpu,precision,groups,m,n,k,tflops\n")
    att.write_text("gpu,kernel,direction,causal,head_dim,seq_len,tflops\n")
    other.write_text("gpu,tflops\nh100,1\n")
    assert (table_kind(gemm), table_kind(att)) == ("gemm", "attention")
    with pytest.raises(KernelTableError) as info:
        table_kind(other)
    assert str(info.value) == (f"kernel table {other}: neither a GEMM table (columns gpu, precision, groups, m, n, k, "
                               "tflops) nor an attention table (columns gpu, kernel, direction, causal, head_dim, "
                               "seq_len, tflops)")
    with pytest.raises(KernelTableError, match="no such file"):
        table_kind(tmp_path / "none.csv")
