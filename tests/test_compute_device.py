"""sim.compute.device: what the kernel model reads of a GPU."""
from sim.compute.device import DEFAULT_HBM_EFFICIENCY, GpuFigures, peaks_of

H100 = GpuFigures("h100", 132, {"bf16": 989.5, "fp8": 1979.0, "mxfp8": None}, 3.35, family="sm90")


def test_a_peak_is_the_listed_one_and_zero_where_none_is_listed():
    """A precision the GPU has no tensor cores for is 0, whether the entry is missing, 0 or empty."""
    assert H100.peak("bf16") == 989.5 and H100.peak("fp8") == 1979.0
    assert H100.peak("mxfp8") == 0.0                       # listed as nothing
    assert H100.peak("fp4") == 0.0                         # not listed
    assert GpuFigures("a100", 108, {"bf16": 312.0, "fp8": 0}, 2.0).peak("fp8") == 0.0
    assert isinstance(H100.peak("bf16"), float)


def test_peaks_of_names_each_gpus_peaks_as_a_copy():
    a100 = GpuFigures("a100", 108, {"bf16": 312.0}, 2.0)
    peaks = peaks_of({"h100": H100, "a100": a100})
    assert peaks == {"h100": {"bf16": 989.5, "fp8": 1979.0, "mxfp8": None}, "a100": {"bf16": 312.0}}
    peaks["a100"]["bf16"] = 0.0
    assert a100.peak("bf16") == 312.0                      # the record's own dict is untouched


def test_the_family_is_looked_up_by_name_unless_given():
    assert GpuFigures("a100", 108, {}, 2.0).family == "" and H100.family == "sm90"
    assert 0 < DEFAULT_HBM_EFFICIENCY <= 1
