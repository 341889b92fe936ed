"""An independent evaluator of a full-mode MoE step: every data-parallel replica is its own set of
SimPy processes, each part a SimPy event, each all-to-all a barrier of the EP group's members (the
straightforward design the lockstep runner replaces). SM sharing is left out (run it with
``comm_sms=0``): with it, the outcome would hang on the order SimPy breaks ties in."""
import simpy

from sim.engine import start_schedule
from sim.network import Fabric
from sim.schedules.ops import FBOp
from sim.training.costs.parts import backward_parts, forward_parts, overlapped_parts, weight_parts
from sim.training.costs.streams import COMM, COMPUTE, as_streams


class ReplicaRunner:
    def __init__(self, step, fabric, replica, barriers, stats):
        self.step, self.fabric, self.replica, self.barriers, self.stats = step, fabric, replica, barriers, stats
        self.seq = {}

    def _seconds(self, rank, part):
        return part.seconds * (1 + part.routed_share * (self.step.comm.load_factor(rank, self.replica) - 1))

    def _layers(self, op):
        return self.step.scenario.chunk.stage_work(op.stage)

    def run(self, env, rank, op):
        start = env.now
        seq = self.seq[rank] = self.seq.get(rank, -1) + 1
        if isinstance(op, FBOp):
            (f_layers, f_head), (b_layers, b_head) = self._layers(op.f), self._layers(op.b)
            comp, comm = overlapped_parts(f_layers, b_layers, f_head, b_head)
        else:
            layers, head = self._layers(op)
            chain = {"F": lambda: forward_parts(layers, head), "W": lambda: weight_parts(layers, head)}.get(
                op.kind, lambda: backward_parts(layers, head, with_w=op.kind == "B"))()
            comp, comm = as_streams(chain)
        done = ([env.event() for _ in comp], [env.event() for _ in comm])
        group = self.step.scenario.layout.group_of_replica(self.replica)
        key = (rank, self.replica)

        def stream(kind, parts):
            for i, part in enumerate(parts):
                for s, j in part.after:
                    yield done[s][j]
                if kind == COMPUTE:
                    dt = self._seconds(rank, part)
                    yield env.timeout(dt)
                    self.stats[key][0] += dt
                else:
                    t0 = env.now
                    entry = self.barriers.setdefault((rank, group, seq, i), [0, env.event()])
                    entry[0] += 1
                    if entry[0] == self.step.scenario.run.ep:
                        entry[1].succeed()
                    yield entry[1]
                    yield env.timeout(self.step.comm.time(part.shape, rank, group))
                    self.stats[key][1] += env.now - t0
                done[kind][i].succeed()

        yield simpy.AllOf(env, [env.process(stream(COMPUTE, comp)), env.process(stream(COMM, comm))])
        self.stats[key][2] += env.now - start

    def deliver(self, env, src, dst, key):
        layout = self.step.scenario.layout
        return self._send(layout.gpu(src, self.replica), layout.gpu(dst, self.replica))

    def _send(self, a, b):
        yield self.fabric.transfer(a, b, self.step.scenario.chunk.activation_bytes())


def reference_full_step(step):
    """(step time, {(rank, replica): [compute_s, comm_s, op_s]}) of ``step`` (a MoEStep)."""
    env = simpy.Environment()
    sc = step.scenario
    fabric = Fabric(env, sc.links)
    barriers, stats = {}, {(r, d): [0.0, 0.0, 0.0] for r in range(sc.run.pp) for d in range(sc.run.dp)}
    runners = [ReplicaRunner(step, fabric, d, barriers, stats) for d in range(sc.run.dp)]
    finishers = [start_schedule(sc.schedule, runner, env) for runner in runners]
    env.run()
    return max(f().makespan for f in finishers), stats
