"""sim.training.comm.kernels: launch and notify costs, SM-bounded throughput and link efficiencies, worked by hand."""
import re

import pytest
import simpy

from sim.network import Fabric, LinkTable
from sim.training.comm.alltoall import CommModel
from sim.training.comm.kernels import FITTABLE, KernelSpec, load_kernels
from sim.training.model.specs import SpecError, load_scenario
from sim.training.scenario import Scenario
from sim.training.step import MoEStep
from topologies import load_topology

NV = 160e9                 # h800-16: NVLink bytes/s per GPU and direction
NV_LAT = 3.3e-6            # GPU -> NVSwitch -> GPU


def test_defaults_come_from_the_deepseek_v3_report():
    """(160 GB/s NVLink + 50 GB/s IB) / 20 SMs: the least per-SM rate that lets 20 SMs fill both."""
    k = load_kernels("deepep")
    assert k.sm_GBps == pytest.approx((160 + 50) / 20)
    assert k.a2a_gpu_rate(20) == pytest.approx(210e9)
    assert k.a2a_gpu_rate(0) is None and load_kernels("ideal").a2a_gpu_rate(20) is None
    assert k.a2a_overhead_s(3e-6) == pytest.approx(4e-6 + 10e-6 + 2 * 3e-6)


def test_a_gpu_engine_bounds_a_transfer_and_is_shared_by_its_flows():
    """One 1 GB NVLink message at a 50 GB/s engine: latency + 1e9 / 50e9; two messages out of one
    GPU to two others share its outgoing engine: 2e9 / 50e9 each."""
    links = LinkTable(load_topology("h800-16"))
    env = simpy.Environment()
    fabric = Fabric(env, links, gpu_rate=50e9)
    done = fabric.transfer(0, 1, 1e9)
    env.run(done)
    assert env.now == pytest.approx(NV_LAT + 1e9 / 50e9, rel=1e-12)
    env = simpy.Environment()
    fabric = Fabric(env, links, gpu_rate=50e9)
    ends = []
    for dst in (1, 2):
        fabric.transfer(0, dst, 1e9).callbacks.append(lambda _e: ends.append(env.now))
    env.run()
    assert ends == pytest.approx([NV_LAT + 2e9 / 50e9] * 2, rel=1e-12)
    assert fabric.link_bytes.size == len(links)            # the engines are not topology links


def test_an_incoming_engine_is_shared_by_the_messages_a_gpu_receives():
    """Two 1 GB NVLink messages into GPU 2 (from GPUs 0 and 1) at a 50 GB/s engine: its incoming
    engine, not its 160 GB/s NVLink, holds them to 25 GB/s each: latency + 2e9 / 50e9."""
    links = LinkTable(load_topology("h800-16"))
    env = simpy.Environment()
    fabric = Fabric(env, links, gpu_rate=50e9)
    ends = []
    for src in (0, 1):
        fabric.transfer(src, 2, 1e9).callbacks.append(lambda _e: ends.append(env.now))
    env.run()
    assert ends == pytest.approx([NV_LAT + 2e9 / 50e9] * 2, rel=1e-12)


def test_link_efficiencies_scale_only_their_kinds():
    links = LinkTable(load_topology("h800-16"))
    scaled = KernelSpec("t", nvlink_efficiency=0.5, ib_efficiency=0.8).scale_links(links)
    for i, kind in enumerate(links.kind):
        want = {"nvlink": 0.5, "ib": 0.8, "pcie": 0.8}[kind] * links.capacity[i]
        assert scaled.capacity[i] == pytest.approx(want)
    assert scaled.route(0, 9)[0].tolist() == links.route(0, 9)[0].tolist()
    assert load_kernels("deepep").scale_links(links) is links


def comm_model(kernels: str, comm_sms: int = 20, seq_len: int = 4096) -> CommModel:
    run = load_scenario("tiny", kernels=kernels, comm_sms=comm_sms, seq_len=seq_len, ep=8, dp=8, pp=2,
                        node_limit=None)
    return MoEStep(Scenario(run)).comm


def test_an_intranode_all_to_all_by_hand():
    """EP8 inside one node, balanced: every GPU sends 7 equal messages of b bytes over its NVLink
    port (one per other GPU; its own tokens stay). Pure link time: 7b / 160 GB/s + latency. With 2
    SMs at 10.5 GB/s the kernel (21 GB/s) is the bound: 7b / 21 GB/s; the kernel's overhead adds
    launch 4 us + notify 10 us + 2 x 3.3 us."""
    ideal, few = comm_model("ideal"), comm_model("deepep", comm_sms=2)
    t = ideal.traffic(0, 0)
    b = t.gpu_tokens[0, 1] * ideal.token_bytes["dispatch"]
    assert ideal.time("dispatch", 0, 0) == pytest.approx(NV_LAT + 7 * b / NV, rel=1e-9)
    assert few.data_time("dispatch", 0, 0) == pytest.approx(7 * b / 21e9, rel=1e-9)
    assert few.overhead(0, 0) == pytest.approx(4e-6 + 10e-6 + 2 * NV_LAT, rel=1e-12)
    assert few.time("dispatch", 0, 0) == pytest.approx(few.overhead(0, 0) + few.data_time("dispatch", 0, 0))


def test_fewer_communication_sms_slow_the_all_to_all_and_speed_compute():
    """The trade-off DeepSeek tuned: below the SMs that fill the links, communication slows; the
    compute beside it is stretched by SMs / (SMs - comm_sms) only."""
    times = {sms: comm_model("deepep", sms).time("dispatch", 0, 0) for sms in (2, 8, 20)}
    assert times[2] > times[8] > times[20]
    assert comm_model("deepep", 40).time("dispatch", 0, 0) == pytest.approx(times[20])   # link-bound already
    slow = Scenario(load_scenario("tiny", kernels="deepep", comm_sms=8)).sm_slowdown
    assert slow == pytest.approx(132 / 124)


def test_each_pipeline_send_and_dp_collective_pays_a_launch(tmp_path):
    """1F1B on the tiny scenario, the same run with only NCCL's launch changed (4 -> 54 us): each
    stage boundary a micro-batch crosses is one more launch on the critical path; the step grows."""
    base = load_scenario("tiny", schedule="1f1b", kernels="ideal")
    fast = MoEStep(Scenario(base)).simulate()
    import yaml
    path = tmp_path / "nccl.yaml"
    path.write_text(yaml.safe_dump({"launch_us": 0.0, "notify_us": 0.0, "notify_round_trips": 0, "sm_GBps": None,
                                    "nccl_launch_us": 50.0}))
    slow = MoEStep(Scenario(base.with_(kernels=str(path)))).simulate()
    # The first micro-batch's forward crosses 3 boundaries and its backward 3 more before rank 0
    # can finish: at least 6 launches on the critical path.
    assert slow.pipeline_end_s - fast.pipeline_end_s >= 6 * 50e-6 - 1e-12


def test_a_faster_link_never_slows_an_all_to_all():
    """The SM bound is a floor on the collective: raising NVLink above what the SMs move (320 GB/s
    against 20 x 10.5) cannot make a hierarchical dispatch slower (a fair split of the SMs among a
    forwarding GPU's flows would starve its IB flows: the kernel gives them their own warps)."""
    from sim.network import MoERouting, route_tokens
    from sim.training.comm.alltoall import measure_all_to_alls
    from topologies import build_from_spec
    spec = {"kind": "fat_tree", "gpu": "h800", "nodes": 4, "gpus_per_node": 8, "nic_bandwidth_GBps": 50,
            "switch_radix": 64, "oversubscription": 1, "rail_optimized": True, "planes": 8}
    traffic = route_tokens(MoERouting(ep=32, gpus_per_node=8, num_experts=256, topk=8, tokens_per_gpu=4096,
                                      node_limit=4))
    times = []
    for nvlink in (160, 320):
        links = LinkTable(build_from_spec({**spec, "nvlink_bandwidth_GBps": nvlink, "name": f"nv{nvlink}"}))
        ends, _ = measure_all_to_alls(links, [(list(range(32)), traffic)], 7168 + 224, "hierarchical", "dispatch",
                                      4, 0.0, 210e9)
        times.append(ends[0])
    assert times[1] <= times[0]


def test_ideal_kernels_are_pure_link_time():
    """No overhead and no engine: the all-to-all is the fabric's time alone."""
    c = comm_model("ideal")
    assert c.overhead(0, 0) == 0.0 and c.time("combine", 0, 0) == c.data_time("combine", 0, 0)


@pytest.mark.parametrize("field, value, needle", [
    ("launch_us", -1, "KernelSpec.launch_us"), ("sm_GBps", 0, "KernelSpec.sm_GBps"),
    ("nvlink_efficiency", 1.5, "KernelSpec.nvlink_efficiency"), ("nccl_sms", 2.5, "KernelSpec.nccl_sms"),
    ("ib_efficiency", float("nan"), "KernelSpec.ib_efficiency"),
    ("fitted", ("warp_size",), r"^kernels 'bad': fitted names unknown parameter\(s\) 'warp_size'; allowed: launch_us, "
                               r"notify_us, sm_GBps, nccl_launch_us, nvlink_efficiency, ib_efficiency, nccl_GBps, "
                               r"nccl_copy_GBps, nccl_reduce_GBps, nvls_GBps, nvls_latency_us$"),
    ("nccl_GBps", 0.0, r"KernelSpec.nccl_GBps \(GB/s\) must be a finite number in \[0.1, 1,000,000\], got 0.0"),
    ("nccl_copy_GBps", float("inf"), r"KernelSpec.nccl_copy_GBps \(GB/s\) must be a finite number"),
    ("nvls_GBps", -5, r"KernelSpec.nvls_GBps \(GB/s\) must be a finite number in \[0.1, 1,000,000\], got -5"),
    ("nvls_latency_us", 2e4, r"KernelSpec.nvls_latency_us must be a finite number in \[0, 10,000\], got 20000"),
    ("nccl_sms", 0, r"KernelSpec.nccl_sms must be an integer in \[1, 100,000\], got 0"),
    ("notify_round_trips", -1, r"KernelSpec.notify_round_trips must be an integer in \[0, 100\], got -1"),
    # the floors calibration fits within (calibrate.BOUNDS): a slower kernel or link is a typo
    ("sm_GBps", 0.05, r"KernelSpec.sm_GBps must be a finite number in \[0.1, 1,000,000\], got 0.05"),
    ("ib_efficiency", 1e-300, r"KernelSpec.ib_efficiency must be a finite number in \[0.01, 1\], got 1e-300")])
def test_bad_kernel_fields_name_themselves(field, value, needle):
    with pytest.raises(SpecError, match=needle):
        KernelSpec("bad", **{field: value})


def test_unknown_kernels_and_fields_are_one_line(tmp_path):
    with pytest.raises(SpecError, match="unknown kernels 'nccl2'.*deepep"):
        load_kernels("nccl2")
    f = tmp_path / "k.yaml"
    f.write_text("launch_us: 3\nwarps: 4\nlanes: 2\n")
    with pytest.raises(SpecError, match=f"^kernels '{re.escape(str(f))}': unknown field\\(s\\) 'lanes', 'warps'; "
                                        "allowed: calibrated_from, "):
        load_kernels(str(f))
    f.write_text("launch_us: [3\n")
    with pytest.raises(SpecError, match=f"^{re.escape(str(f))}: not valid YAML at line 2"):
        load_kernels(str(f))
    with pytest.raises(SpecError, match="RunSpec.kernels"):
        Scenario(load_scenario("tiny", kernels="nccl2"))


def test_engines_that_cannot_bind_are_left_out_with_the_same_times():
    """A GPU's own flows leave over its own links, so an engine at least their capacity never binds:
    the fabric leaves it out. Forcing it in gives the same completion times (an all-to-all of
    16 GPUs on h800-16 at 210 GB/s = NVLink 160 + NIC 50)."""
    from sim.network import MoERouting, all_to_all, route_tokens
    links = LinkTable(load_topology("h800-16"))
    traffic = route_tokens(MoERouting(ep=16, gpus_per_node=8, num_experts=64, topk=8, tokens_per_gpu=4096,
                                      node_limit=2, skew=1.0, seed=3))

    def ends(force: bool):
        env = simpy.Environment()
        fabric = Fabric(env, links, gpu_rate=210e9)
        assert not fabric._engine_out.any()
        if force:
            fabric._engine_out[:] = fabric._engine_in[:] = True
        done = all_to_all(fabric, list(range(16)), traffic, 7168.0, "hierarchical", "dispatch", 4)
        env.run(done)
        return env.now, fabric.link_bytes.copy()
    (t_skip, bytes_skip), (t_force, bytes_force) = ends(False), ends(True)
    assert t_skip == pytest.approx(t_force, rel=1e-12)
    assert bytes_skip == pytest.approx(bytes_force, rel=1e-12)


def test_a_kernel_file_is_named_by_its_path_and_says_what_was_calibrated(tmp_path):
    """The run's provenance line: defaults, or the profile and the fitted parameters with the
    others left at their defaults (none when all were fitted)."""
    f = tmp_path / "mine.yaml"
    f.write_text("launch_us: 3.0\n")
    assert load_kernels(str(f)).name == str(f) and load_kernels(str(f)).launch_us == 3.0
    k = load_kernels("deepep")
    assert k.provenance() == ("kernels deepep: calibrated from experiments/profiles/xla-nccl-h100.csv (nccl_launch_us, "
                              "nccl_GBps, nccl_copy_GBps, nccl_reduce_GBps, nvls_GBps, nvls_latency_us); defaults: "
                              "launch_us, notify_us, sm_GBps, nvlink_efficiency, ib_efficiency")
    assert load_kernels("ideal").provenance() == "kernels ideal: first-principles defaults (none calibrated)"
    fitted = k.with_(calibrated_from="nccl.csv", fitted=("sm_GBps", "launch_us"))
    assert fitted.provenance() == ("kernels deepep: calibrated from nccl.csv (sm_GBps, launch_us); defaults: "
                                   "notify_us, nccl_launch_us, nvlink_efficiency, ib_efficiency, nccl_GBps, "
                                   "nccl_copy_GBps, nccl_reduce_GBps, nvls_GBps, nvls_latency_us")
    every = k.with_(calibrated_from="all.csv", fitted=FITTABLE)
    assert every.provenance() == f"kernels deepep: calibrated from all.csv ({', '.join(FITTABLE)}); defaults: none"
