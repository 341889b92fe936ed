"""Regenerate ``torch_orders.json``: PyTorch's own op orders for several (P, M).

Needs PyTorch (not a project dependency): ``pip install torch`` in a scratch venv, then
``python tests/data/make_torch_orders.py``. The tests compare our generators against this file.
Each op is written in our notation: ``kind mb@stage`` or ``[F mb@stage & B mb@stage]``.
"""
import json
import pathlib

import torch
from torch.distributed.pipelining import schedules as S

KIND = {"F": "F", "B": "B", "I": "I", "W": "W"}


def fmt(a):
    if a.sub_actions is not None:
        f, b = a.sub_actions
        return f"[{fmt(f)}&{fmt(b)}]"
    return f"{KIND[a.computation_type.value]}{a.microbatch_index}@{a.stage_index}"


def orders(order):
    return {str(r): [fmt(a) for a in ops if a is not None and (a.sub_actions is not None or a.computation_type.value in KIND)]
            for r, ops in order.items()}


class _TracingStage:
    """Stands in for a PipelineStage: p2p ops are empty, compute calls are recorded."""

    def __init__(self, index, log):
        self.stage_index, self.log = index, log
        self.get_fwd_recv_ops = self.get_fwd_send_ops = lambda mb: []
        self.get_bwd_recv_ops = self.get_bwd_send_ops = lambda mb: []

    def forward_one_chunk(self, mb, *args, **kwargs):
        self.log.append(f"F{mb}@{self.stage_index}")

    def backward_one_chunk(self, mb, *args, **kwargs):
        self.log.append(f"B{mb}@{self.stage_index}")

    def perform_reduce_grad(self, *args, **kwargs):
        pass


def single(cls, P, M):
    """Trace the runtime loop (``_step_microbatches``) of a single-stage schedule on each rank.
    (Its ``_get_pipeline_order`` IR is not used: for 1F1B it skips micro-batch 0 on the last rank.)"""
    out = {}
    for rank in range(P):
        obj = object.__new__(cls)
        log = []
        obj._num_stages, obj._n_microbatches, obj._stage = P, M, _TracingStage(rank, log)
        obj._has_backward, obj.scale_grads = True, True
        obj._check_inputs = lambda *a, **k: ([None] * M, [{}] * M)
        obj._initialize_stage = lambda *a, **k: None
        obj._maybe_compute_loss = lambda *a, **k: None
        obj._maybe_get_loss = lambda *a, **k: None
        obj._update_losses = lambda *a, **k: None
        cls._step_microbatches(obj, [None] * M, [{}] * M)
        out[str(rank)] = log
    return out


def multi(cls, P, M, v=2, **extra):
    obj = object.__new__(cls)
    obj.pp_group_size, obj._n_microbatches, obj.n_local_stages = P, M, v
    obj.num_stages = P * v
    for k, val in extra.items():
        setattr(obj, k, val)
    return orders({r: cls._calculate_single_rank_operations(obj, r) for r in range(P)})


out = {"torch_version": torch.__version__, "1f1b": {}, "gpipe": {}, "zbv": {}, "dualpipev": {},
       "interleaved-1f1b": {}}
for P, M in [(2, 4), (4, 8), (4, 12), (8, 16), (8, 24)]:
    key = f"{P},{M}"
    out["1f1b"][key] = single(S.Schedule1F1B, P, M)
    out["gpipe"][key] = single(S.ScheduleGPipe, P, M)
    out["zbv"][key] = multi(S.ScheduleZBVZeroBubble, P, M)
    out["dualpipev"][key] = multi(S.ScheduleDualPipeV, P, M)
# (4, 10, 2) and on: M not a multiple of P, micro-batches per round M / max(1, M // P)
for P, M, v in [(2, 4, 2), (4, 8, 2), (4, 8, 3), (4, 16, 2), (8, 16, 2), (4, 10, 2), (4, 6, 2), (4, 15, 3), (8, 12, 2)]:
    rounds = max(1, M // P)
    out["interleaved-1f1b"][f"{P},{M},{v}"] = multi(
        S.ScheduleInterleaved1F1B, P, M, v, number_of_rounds=rounds, microbatches_per_round=M // rounds)
path = pathlib.Path(__file__).with_name("torch_orders.json")
path.write_text(json.dumps(out, indent=1) + "\n")
print("wrote", path)
