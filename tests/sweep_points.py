"""Point functions for the sweep fault tests; imported by the Dask workers those tests start (the
tests folder is on their PYTHONPATH)."""
import os
import signal
import time

from sim.limits import check_deadline


def square(p: dict) -> dict:
    """``x`` squared after ``sleep`` seconds; kills its own worker process when ``x == die_at``."""
    time.sleep(float(p.get("sleep", 0)))
    if int(p["x"]) == int(p.get("die_at", -1)):
        os.kill(os.getpid(), signal.SIGKILL)           # like an out-of-memory kill or a crash
    return {"y": int(p["x"]) ** 2, "half": int(p["x"]) / 2}


def spin(p: dict) -> dict:
    """Runs until its deadline stops it (cooperative, like the engine), when ``x == spin_at``;
    sleeps without looking at the deadline (a point stuck outside the simulation loop) when
    ``x == stuck_at``."""
    if int(p["x"]) == int(p.get("stuck_at", -1)):
        time.sleep(120)
    if int(p["x"]) == int(p.get("spin_at", -1)):
        while True:
            check_deadline()
            time.sleep(0.01)
    return square(p)
