"""An independent, SimPy-free evaluator of a schedule's makespan, to check the engine against.

Each rank runs its ops in list order; an op starts at max(rank free, inputs ready). Ranks are
advanced round-robin until nothing moves (quadratic, fine for small schedules)."""
from sim.schedules.ops import FBOp


def reference_times(schedule, F, I, W):
    S = schedule.num_stages
    cost = {"F": F, "I": I, "W": W, "B": I + W}
    ready = {}
    free = {r: 0.0 for r in schedule.ranks}
    pos = {r: 0 for r in schedule.ranks}
    busy = {r: 0.0 for r in schedule.ranks}
    moved = True
    while moved:
        moved = False
        for r, ops in schedule.ranks.items():
            while pos[r] < len(ops):
                op = ops[pos[r]]
                subs = (op.f, op.b) if isinstance(op, FBOp) else (op,)
                needs = []
                for p in subs:
                    if p.kind == "F" and p.stage > 0:
                        needs.append(("F", p.mb, p.stage - 1))
                    elif p.kind in ("I", "B"):
                        needs.append(("F", p.mb, p.stage))
                        if p.stage < S - 1:
                            needs.append(("G", p.mb, p.stage + 1))
                    elif p.kind == "W":
                        needs.append(("I", p.mb, p.stage))
                if any(k not in ready for k in needs):
                    break
                start = max([free[r]] + [ready[k] for k in needs])
                end = start + sum(cost[p.kind] for p in subs)
                for p in subs:
                    if p.kind == "F":
                        ready[("F", p.mb, p.stage)] = end
                    elif p.kind in ("I", "B"):
                        ready[("G", p.mb, p.stage)] = end
                        if p.kind == "I":
                            ready[("I", p.mb, p.stage)] = end
                busy[r] += end - start
                free[r] = end
                pos[r] += 1
                moved = True
    assert all(pos[r] == len(ops) for r, ops in schedule.ranks.items()), "reference evaluator deadlocked"
    return max(free.values()), busy


def zbv_padded(P: int, M: int) -> dict:
    """PyTorch's ``ScheduleZBVZeroBubble._calculate_single_rank_operations`` as written there: pad M
    up to 2P-1, run every loop in full, drop the padding's ops at the end. O(P) per rank; the
    simulator's generator stops each loop early and must give the same ops."""
    from sim.schedules.ops import Op
    S, n, ranks = 2 * P, max(2 * P - 1, M), {}
    for r in range(P):
        c0, c1 = r, S - 1 - r
        ops, f0, f1, b0, b1 = [], 0, 0, 0, 0
        for _ in range(2 * (P - r) - 1):
            ops.append(Op("F", f0, c0)); f0 += 1
        for _ in range(r):
            ops.append(Op("F", f1, c1)); f1 += 1
            ops.append(Op("F", f0, c0)); f0 += 1
        for _ in range(P - r):
            ops.append(Op("F", f1, c1)); f1 += 1
            ops += [Op("I", b1, c1), Op("W", b1, c1)]; b1 += 1
        while f1 < f0 or f0 < n:
            if f0 < n:
                ops.append(Op("F", f0, c0)); f0 += 1
            ops += [Op("I", b0, c0), Op("W", b0, c0)]; b0 += 1
            ops.append(Op("F", f1, c1)); f1 += 1
            ops += [Op("I", b1, c1), Op("W", b1, c1)]; b1 += 1
        w0, w1 = b0, b1
        for _ in range(r):
            ops.append(Op("I", b0, c0)); b0 += 1
            ops.append(Op("I", b1, c1)); b1 += 1
        for _ in range(P - r):
            ops.append(Op("I", b0, c0)); b0 += 1
            ops.append(Op("W", w0, c0)); w0 += 1
        ops += [Op("W", mb, c1) for mb in range(w1, b1)]
        ops += [Op("W", mb, c0) for mb in range(w0, b0)]
        ranks[r] = [op for op in ops if op.mb < M]
    return ranks
