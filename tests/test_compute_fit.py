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
from sim.compute.device import peaks_of
from sim.compute.fit import attention_flops, calibrate, fit_gemm, gemm_row_seconds
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
    """GB200 has no shape table: sm100's fit, its rate times MAMF's GB200 / B200 ratio (BF16 1822 / 1745,
    FP8 3615.6 / 3432.5); A100 has its own (Vidur's measured GEMMs)."""
    fitted, _ = fresh
    for precision, ratio in (("bf16", 1822.0 / 1745.0), ("fp8", 3615.6 / 3432.5)):
        assert fitted["gb200"]["gemm"][precision]["rate_tflops"] == pytest.approx(
            fitted["sm100"]["gemm"][precision]["rate_tflops"] * ratio, rel=1e-4)
        assert fitted["gb200"]["gemm"][precision]["k0"] == fitted["sm100"]["gemm"][precision]["k0"]
    assert fitted["sm80"]["gemm"]["bf16"]["source"] == "gemm_vidur_a100.csv, gemm_mamf.csv"
    assert fitted["sm80"]["gemm"]["bf16"]["rows"] == 337
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
    assert "gemm_vidur_a100.csv" in out and "gemm_vidur_h100.csv" in out
    assert "sm80 (a100): bf16: rate 238.1 TFLOPS" in out


def test_a_users_table_makes_a_family_a_run_uses(tmp_path):
    """A user's own GEMM table (here: XLA's H100 rows at 90% of their throughput, as if measured on a
    slower machine) fitted into family `mine`: 90% of the rate fitted to XLA's rows as they are; a GPU
    of their own naming it runs slower GEMMs."""
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
    gpus = {n: load_gpu(n).figures() for n in ("h100", "h800", "h200")}
    as_measured = fit_gemm(read_gemm_table(TABLES / "gemm_xla_sm90_bf16.csv", peaks_of(gpus)), gpus, "xla")
    assert fams["mine"]["gemm"]["bf16"]["rate_tflops"] == pytest.approx(0.9 * as_measured.rate_tflops, rel=0.02)
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


def _same(fresh, shipped, where="kernels.yaml"):
    """``fresh`` equals ``shipped``: the same keys in the same order, strings and integers exact,
    floats to 1e-3 (the fits' digits)."""
    if isinstance(fresh, dict):
        assert list(fresh) == list(shipped), where
        for key in fresh:
            _same(fresh[key], shipped[key], f"{where}/{key}")
    elif isinstance(fresh, list):
        assert len(fresh) == len(shipped), where
        for i, (a, b) in enumerate(zip(fresh, shipped)):
            _same(a, b, f"{where}[{i}]")
    elif isinstance(fresh, float) or isinstance(shipped, float):
        assert fresh == pytest.approx(shipped, rel=1e-3, abs=1e-3), where
    else:
        assert fresh == shipped, where


def test_the_shipped_file_is_the_fresh_fit_entry_by_entry(fresh):
    """Every entry of kernels.yaml, not only the fitted rates: each family's GPUs and BF16 peak
    (989.4 for sm90's H100), each fit's source, rows and errors, and where a borrowed attention
    comes from (sm80's declared source; sm100's 'family sm90's flash3 fits')."""
    from sim.compute.fit import FITTED
    fitted, _ = fresh
    shipped = yaml.safe_load(FITTED.read_text())
    _same(fitted, shipped)
    assert fitted["sm90"]["reference_bf16_tflops"] == load_gpu("h100").figures().peak("bf16") > 900
    assert fitted["sm100"]["attention"]["source"] == "family sm90's flash3 fits"
    assert fitted["sm80"]["attention"]["source"].startswith("FlashAttention-2 (Dao 2023, arXiv 2307.08691)")


def test_a_borrowed_kernel_runs_at_the_published_fraction_exactly(fresh):
    """sm80's FlashAttention-2: per_peak x the borrowed fit's best forward rate (TFLOPS at 16K
    tokens, head 128) is the declared 0.73, to the float's last digits."""
    from sim.compute.fit import BENCH_TOKENS
    fitted, _ = fresh
    att = fitted["sm80"]["attention"]
    best_tflops = float(AttentionFit(**att["fits"]["fwd_0"]).rate(BENCH_TOKENS, 128)) / 1e12
    assert att["per_peak"] * best_tflops == pytest.approx(0.73, rel=1e-14, abs=0)


def test_each_report_row_names_its_family_and_two_decimals(fresh):
    fitted, report = fresh
    kinds = {r.kind.split()[0] for r in report}
    assert kinds == {"gemm", "attention"}
    for r in report:
        assert r.family in fitted, r
        assert round(r.rms_pct, 2) == r.rms_pct and round(r.max_pct, 2) == r.max_pct, r
    assert any(round(r.rms_pct, 1) != r.rms_pct for r in report if r.kind.startswith("gemm"))


def test_the_written_yaml_folds_at_120_columns():
    """kernels.yaml's long sources stay on one line up to 120 columns (as written and shipped)."""
    from sim.compute.fit import fitted_text
    text = fitted_text({"f": {"source": ("a source of ninety characters, " * 3).strip()}})
    assert "\n  source: a source of ninety characters, a source of ninety characters, a source of ninety " \
           "characters,\n" in text


def test_a_family_scaled_from_a_table_without_its_rows_is_one_line(gpus, tmp_path):
    from sim.checks import InputError
    base = yaml.safe_load(open("sim/compute/presets/calibration.yaml"))["families"]
    ratio = tmp_path / "ratio.csv"
    ratio.write_text("gpu,precision,groups,m,n,k,tflops\nh100,bf16,1,8192,8192,8192,700\n")
    sm80 = {**base["sm80"], "gemm": {"bf16": {"scale_from": "sm90", "ratio_table": str(ratio)}}}
    path = tmp_path / "calibration.yaml"
    path.write_text(yaml.safe_dump({"families": {"sm90": base["sm90"], "sm80": sm80}}))
    with pytest.raises(InputError) as info:
        calibrate(gpus, path)
    assert str(info.value) == (f"calibration.yaml: {ratio} needs one bf16 row of ['a100'] and one of "
                               f"{base['sm90']['gpus']} to scale from, got 0 and 1")


def test_a_gemm_fits_k0_stops_at_4096(gpus):
    """Rows whose efficiency still climbs at k = 16K (made with k0 = 20,000): the fit's k0 sits on
    its upper bound, 4,096 elements."""
    from sim.compute.fit import fit_gemm
    from sim.compute.tables import GemmRow
    truth = GemmFit(rate_tflops=700.0, k0=20000.0, fixed_us=2.0)
    shapes = [(1, m, n, k) for m in (4096, 8192) for n in (4096, 8192) for k in (256, 1024, 4096, 16384)]
    rows = [GemmRow("h100", "bf16", *s, 1.0, i) for i, s in enumerate(shapes, start=1)]
    seconds = gemm_row_seconds(truth, rows, gpus)
    rows = [r._replace(tflops=r.flops / t / 1e12) for r, t in zip(rows, seconds)]
    assert fit_gemm(rows, gpus, "synthetic").k0 == 4096.0


@pytest.fixture(scope="module")
def user_tables(tmp_path_factory):
    """A user's GEMM table (XLA's H100 rows) and attention table (FlashAttention-3's rows of the
    shipped table, renamed kernel 'mine'), as files."""
    from sim.compute.tables import TABLES
    folder = tmp_path_factory.mktemp("user")
    gemm = folder / "gemm.csv"
    gemm.write_text((TABLES / "gemm_xla_sm90_bf16.csv").read_text())
    lines = [l for l in (TABLES / "attention_flash_h100.csv").read_text().splitlines() if not l.startswith("#")]
    header, rows = lines[0], [l for l in lines[1:] if ",flash3," in l]
    att = folder / "att.csv"
    att.write_text("\n".join([header] + [r.replace(",flash3,", ",mine,") for r in rows]) + "\n")
    return gemm, att, header, rows


def test_a_users_attention_table_makes_the_familys_attention(gpus, user_tables):
    """calibrate --kernels with an attention table: the family's attention is that table's kernel,
    its fits per direction and mask, each reported with its own errors; the GEMM fit names its table."""
    from sim.compute.fit import calibrate_tables
    gemm, att, _, rows = user_tables
    shipped = load_families()
    own, report = calibrate_tables([gemm, att], gpus, "mine", shipped["sm90"], "sm90")
    fam = own["mine"]
    assert fam["gpus"] == ["h100"] and fam["reference_bf16_tflops"] == gpus["h100"].peak("bf16") > 900
    assert fam["gemm"]["bf16"]["source"] == str(gemm)
    assert fam["attention"]["kernel"] == "mine" and fam["attention"]["table"] == str(att)
    assert fam["attention"]["source"] == str(att) and fam["attention"]["per_peak"] is None
    assert set(fam["attention"]["fits"]) == {"fwd_0", "fwd_1", "bwd_0"}
    for r in report:
        assert r.family == "mine" and r.rms_pct is not None and r.max_pct is not None
        if r.kind.startswith("attention"):
            key = {"attention mine fwd": "fwd_0", "attention mine fwd causal": "fwd_1", "attention mine bwd": "bwd_0"}
            fit = fam["attention"]["fits"][key[r.kind]]
            assert (r.rows, r.rms_pct, r.max_pct) == (fit["rows"], fit["rms_pct"], fit["max_pct"])
            assert r.rms_pct > 0


def test_without_an_attention_table_the_base_familys_runs_at_the_peak_ratio(gpus, user_tables):
    from sim.compute.fit import calibrate_tables
    shipped = load_families()
    own, _ = calibrate_tables([user_tables[0]], gpus, "mine", shipped["sm90"], "sm90")
    att = own["mine"]["attention"]
    assert att["per_peak"] == 1.0 / shipped["sm90"]["reference_bf16_tflops"]
    assert att["source"] == "family sm90's flash3 fits" and att["kernel"] == "flash3"


def test_a_users_bad_attention_tables_are_one_line(gpus, user_tables, tmp_path):
    from sim.checks import InputError
    from sim.compute.fit import calibrate_tables
    gemm, _, header, rows = user_tables
    base = load_families()["sm90"]
    two = tmp_path / "two.csv"
    two.write_text("\n".join([header, rows[0].replace(",flash3,", ",b,"), rows[1].replace(",flash3,", ",a,")]) + "\n")
    with pytest.raises(InputError) as info:
        calibrate_tables([gemm, two], gpus, "mine", base, "sm90")
    assert str(info.value) == ("calibrate --kernels: the attention tables hold several kernels (a, b); give one "
                               "kernel's rows")
    backward = tmp_path / "bwd.csv"
    backward.write_text("\n".join([header] + [r.replace(",flash3,", ",m,") for r in rows if ",bwd," in r]) + "\n")
    with pytest.raises(InputError) as info:
        calibrate_tables([gemm, backward], gpus, "mine", base, "sm90")
    assert str(info.value) == ("calibrate --kernels: the attention table needs forward rows without the causal mask "
                               "(direction fwd, causal 0)")
