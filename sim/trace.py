"""Chrome / Perfetto trace export (``chrome://tracing``, ui.perfetto.dev): JSON "traceEvents".

A process per rank ("rank r") with a thread per stream: ``ops`` (schedule ops), and for the
traced (middle) rank of a MoE step ``compute`` and ``communication`` (the parts; a compute part that ran
beside a communication kernel says how much longer than alone in ``args.beside_comm``, its kernels on
the SMs and HBM bandwidth that kernel left), and under ZeRO-3 ``data-parallel communication`` (each
layer's weight gathers and gradient scatters, beside the layers); a counter track per busiest link
of the step's fabric, its utilization per time bin (when the step recorded its link timeline; in
measured communication the track's name says the all-to-alls are not on it), or else the mean
utilization of the measured all-to-alls. Times in microseconds.
"""
from __future__ import annotations

from pathlib import Path

from .engine import EngineResult
from .io import write_json_atomic


def engine_events(result: EngineResult, time_scale: float = 1e6, offset_s: float = 0.0) -> list[dict]:
    events = []
    for rank in sorted(result.schedule.ranks):
        events.append({"name": "process_name", "ph": "M", "pid": rank, "args": {"name": f"rank {rank}"}})
        events.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": "ops"}})
    for rank, kind, mb, stage, b_mb, b_stage, start, end in result.records:
        name = f"{kind}{mb}@{stage}" if kind != "FB" else f"F{mb}@{stage}&B{b_mb}@{b_stage}"
        events.append({"name": name, "cat": kind, "ph": "X", "pid": rank, "tid": 0,
                       "ts": (start + offset_s) * time_scale,
                       "dur": (end - start) * time_scale, "args": {"mb": mb, "stage": stage}})
    return events


def write_chrome_trace(result, path: str | Path, busiest: int = 8) -> Path:
    """``result``: an EngineResult (zero-comm runs) or a MoE StepResult."""
    return write_json_atomic({"traceEvents": trace_events(result, busiest), "displayTimeUnit": "ms"}, path)


def write_jobs_trace(results: dict, path: str | Path, busiest: int = 8) -> Path:
    """Several jobs' steps on one cluster (``results``: job name -> the StepResults of its steps in
    the shared run, each placed at its ``start_s``) in one trace: a group of processes per job,
    ``<job>: rank r`` (process ids ``1000 x (k + 1) + r`` for the k-th job, sorted job by job), and
    the link counters of the first job's first step (the shared network's, from then to the end)."""
    events = []
    for k, (name, steps) in enumerate(results.items()):
        base = 1000 * (k + 1)
        named: set[tuple] = set()              # (pid, event, thread) named already
        for n, result in enumerate(steps):
            for event in trace_events(result, busiest, getattr(result, "start_s", 0.0)):
                pid = event.get("pid")
                if pid == -1:
                    if k == 0 and n == 0:
                        events.append(event)
                    continue
                event = dict(event, pid=base + pid)
                if event["ph"] == "M":
                    if (pid, event["name"], event.get("tid")) in named:
                        continue                # each step names the same processes and threads
                    named.add((pid, event["name"], event.get("tid")))
                if event["name"] == "process_name":
                    event["args"] = {"name": f"{name}: {event['args']['name']}"}
                    events.append({"name": "process_sort_index", "ph": "M", "pid": base + pid,
                                   "args": {"sort_index": base + pid}})
                events.append(event)
    return write_json_atomic({"traceEvents": events, "displayTimeUnit": "ms"}, path)


def trace_events(result, busiest: int = 8, offset_s: float = 0.0) -> list[dict]:
    """The trace's events of one EngineResult or MoE StepResult (see the module); its ops and parts
    ``offset_s`` later (a job's later step: :func:`write_jobs_trace`), the link counters as
    recorded."""
    engine = getattr(result, "engine", result)
    scale = 1e6
    events = engine_events(engine, scale, offset_s)
    parts = getattr(result, "part_trace", None) or []
    if parts:
        pid = result.traced_rank           # the rank whose parts a MoE step records
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 1, "args": {"name": "compute"}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 2, "args": {"name": "communication"}})
        if any(e.stream == 2 for e in parts):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 3,
                           "args": {"name": "data-parallel communication (ZeRO-3)"}})
        for e in parts:
            events.append({"name": e.name, "cat": "compute" if e.stream == 0 else "comm", "ph": "X", "pid": pid,
                           "tid": 1 + e.stream, "ts": (e.start + offset_s) * scale, "dur": (e.end - e.start) * scale,
                           "args": {"op": e.op} | ({"beside_comm": round(e.stretch, 4)} if e.stretch != 1.0 else {})
                           | ({"peer_wait_us": round(e.peer_wait * scale, 3)} if e.peer_wait > 0 else {})})
    timeline = getattr(result, "link_timeline", None)
    if timeline is not None and len(timeline):
        top = list(dict.fromkeys(timeline["link"]))[:busiest]
        for row in timeline[timeline["link"].isin(top)].itertuples():
            events.append({"name": row.link, "ph": "C", "pid": -1, "ts": row.time_s * scale,
                           "args": {"utilization": float(row.utilization)}})
    for shape, df in ((getattr(result, "link_stats", None) or {}).items() if timeline is None else ()):
        for row in df.head(busiest).itertuples():
            events.append({"name": f"{shape} {row.link}", "ph": "C", "pid": -1, "ts": 0,
                           "args": {"mean_util": float(row.mean_util)}})
            events.append({"name": f"{shape} {row.link}", "ph": "C", "pid": -1, "ts": engine.makespan * scale,
                           "args": {"mean_util": float(row.mean_util)}})
    if any(e.get("pid") == -1 for e in events):
        run = getattr(result, "run", None)
        measured = run is not None and getattr(run, "communication", "measured") == "measured"
        label = "busiest links (all-to-all)" if timeline is None else (
            "busiest links: pipeline sends and DP traffic only (all-to-alls measured apart, not on this fabric; "
            "--communication live adds them)" if measured else "busiest links of the step (all traffic)")
        events.append({"name": "process_name", "ph": "M", "pid": -1, "args": {"name": label}})
    return events
