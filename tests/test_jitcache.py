"""sim.network.jitcache: numba's cache files older than a kernel file are removed."""
import os
from pathlib import Path

import sim.network
from sim.network.jitcache import KERNEL_FILES, drop_stale


def _package(tmp_path: Path, cache_ns: int, newest_source_ns: int) -> Path:
    """A package folder with every kernel file at time 1 s but ``fairshare/refill.py`` at
    ``newest_source_ns``, and numba cache files (and a bytecode file) at ``cache_ns``: a step
    kernel's in ``fairshare/__pycache__``, a traffic kernel's in ``__pycache__``."""
    for name in KERNEL_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
        os.utime(tmp_path / name, ns=(1_000_000_000, 1_000_000_000))
    os.utime(tmp_path / "fairshare/refill.py", ns=(newest_source_ns, newest_source_ns))
    for cache, name in (("fairshare", "step.solve-1.py311.nbi"), ("fairshare", "step.solve-1.py311.1.nbc"),
                        ("", "traffic.route-1.py311.nbi"), ("fairshare", "step.cpython-311.pyc")):
        (tmp_path / cache / "__pycache__").mkdir(parents=True, exist_ok=True)
        path = tmp_path / cache / "__pycache__" / name
        path.write_text("")
        os.utime(path, ns=(cache_ns, cache_ns))
    return tmp_path


def _caches(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("**/__pycache__/*"))


def test_caches_older_than_a_kernel_file_are_removed(tmp_path):
    """fairshare/refill.py edited after the step kernels were cached: their caches go (they hold
    refill's old code), in both folders; the bytecode stays."""
    folder = _package(tmp_path, cache_ns=2_000_000_000, newest_source_ns=3_000_000_000)
    assert drop_stale(folder, ()) == 3
    assert _caches(folder) == ["step.cpython-311.pyc"]


def test_caches_newer_than_every_kernel_file_are_kept(tmp_path):
    folder = _package(tmp_path, cache_ns=3_000_000_000, newest_source_ns=2_000_000_000)
    assert drop_stale(folder, ()) == 0
    assert len(_caches(folder)) == 4


def test_a_cache_as_new_as_the_newest_kernel_file_is_kept(tmp_path):
    """Only a cache file strictly older than a kernel file is stale."""
    folder = _package(tmp_path, cache_ns=2_000_000_000, newest_source_ns=2_000_000_000)
    assert drop_stale(folder, ()) == 0


def test_a_kernel_file_dated_in_the_future_removes_nothing(tmp_path):
    """Copied from a machine whose clock was ahead: every cache would look stale until that date,
    and every run would compile again; they are kept."""
    import time
    future = time.time_ns() + 3600 * 10 ** 9
    folder = _package(tmp_path, cache_ns=2_000_000_000, newest_source_ns=future)
    assert drop_stale(folder, ()) == 0
    assert len(_caches(folder)) == 4


def test_a_folder_without_caches_or_kernel_files_is_left_alone(tmp_path):
    assert drop_stale(tmp_path, ()) == 0
    (tmp_path / "__pycache__").mkdir()
    assert drop_stale(tmp_path, ()) == 0            # no kernel files here


def test_the_kernel_files_are_the_modules_that_compile_with_numba():
    folder = Path(sim.network.__file__).parent
    compiled = {p.relative_to(folder).as_posix() for p in folder.glob("**/*.py")
                if "njit" in p.read_text() and p.name not in ("jitcache.py", "jit.py")}
    assert compiled == set(KERNEL_FILES)
    from sim.network.jitcache import CALLED_KERNELS
    rng = Path(sim.network.__file__).parent.parent / "rng.py"
    assert CALLED_KERNELS == (rng.resolve(),) and "njit" in rng.read_text()      # traffic's kernels call it


def test_a_called_kernel_elsewhere_edited_drops_the_caches(tmp_path):
    """sim/rng.py edited after traffic's kernels were cached (they hold its draws): the caches go."""
    folder = _package(tmp_path / "pkg", cache_ns=2_000_000_000, newest_source_ns=1_000_000_000)
    other = tmp_path / "rng.py"
    other.write_text("")
    os.utime(other, ns=(3_000_000_000, 3_000_000_000))
    assert drop_stale(folder, ()) == 0 and drop_stale(folder, (other,)) == 3
