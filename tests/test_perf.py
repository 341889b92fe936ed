"""sim.perf: the garbage collector is off inside gc_paused and back as it was after."""
import gc

import pytest

from sim.perf import gc_paused


def test_gc_paused_restores_the_previous_state():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()                 # was off before: stays off
    finally:
        gc.enable()


def test_gc_paused_restores_on_error():
    with pytest.raises(KeyError):
        with gc_paused():
            raise KeyError("x")
    assert gc.isenabled()
