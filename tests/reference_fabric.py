"""An independent evaluator of the fabric: a plain event loop (no SimPy, no incremental solving)
that recomputes every flow's max-min rate with the numpy oracle whenever a flow starts or ends."""
import numpy as np

from sim.network.fairshare import max_min_rates


def reference_completions(links, transfers):
    """``transfers``: (start time, src GPU, dst GPU, bytes). Returns each one's completion time:
    its start, its route's latency, then draining at the max-min rate of the moment."""
    pending = []                                 # (time it starts sending, index, route, bytes)
    done = {}
    for i, (t0, src, dst, nbytes) in enumerate(transfers):
        if src == dst:
            done[i] = t0
            continue
        route, latency = links.route(src, dst)
        if nbytes == 0:
            done[i] = t0 + latency
        else:
            pending.append((t0 + latency, i, route, float(nbytes)))
    pending.sort(key=lambda x: (x[0], x[1]))
    active = {}                                  # index -> [route, bytes left]
    now = 0.0
    while pending or active:
        if active:
            ids = sorted(active)
            flow = np.concatenate([[k] * active[i][0].size for k, i in enumerate(ids)]).astype(np.int64)
            link = np.concatenate([active[i][0] for i in ids])
            rates = max_min_rates(flow, link, links.capacity, len(ids))
            finish = min(active[i][1] / r for i, r in zip(ids, rates))
        else:
            finish = np.inf
        nxt_start = pending[0][0] if pending else np.inf
        step = min(finish, nxt_start - now)
        if active:
            for i, r in zip(ids, rates):
                active[i][1] -= r * step
        now += step
        for i in [i for i in active if active[i][1] <= 1e-9 * transfers[i][3] + 1e-6]:
            done[i] = now
            del active[i]
        while pending and pending[0][0] <= now:
            _, i, route, nbytes = pending.pop(0)
            active[i] = [route, nbytes]
    return [done[i] for i in range(len(transfers))]
