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
