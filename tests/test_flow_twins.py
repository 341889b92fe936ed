"""sim.training.comm.flow_twins: a job that is the same flow system as another up to renaming links is found
as its twin, and its measurement (ends and link statistics) is the other's renamed, exactly what
measuring it gives."""
import pandas as pd

from sim.network import LinkTable, MoERouting, route_tokens
from sim.training.comm.alltoall import measure_all_to_alls
from sim.training.comm.flow_twins import TwinJobs, renamed_stats
from topologies import load_topology


def pairs_of(gpus):
    """The hierarchical all-to-all's pairs: same node, or the same GPU index on another node."""
    return [(a, b) for a in gpus for b in gpus if a != b and (a // 8 == b // 8 or a % 8 == b % 8)]


def test_two_alike_ep_groups_are_twins_and_the_renamed_measurement_is_the_measurement():
    links = LinkTable(load_topology("h800-64"))
    traffic = route_tokens(MoERouting(ep=16, gpus_per_node=8, num_experts=32, topk=4, tokens_per_gpu=256))
    a, b = list(range(0, 16)), list(range(16, 32))            # two EP16 groups of two nodes each
    rest = (7168.0, "hierarchical", "dispatch", 4, 0.0, None)
    job_a, job_b = ([(a, traffic)], *rest), ([(b, traffic)], *rest)
    classes = TwinJobs(links)
    assert classes.twin_of("a", job_a, pairs_of(a)) is None
    other, sig_a, sig_b = classes.twin_of("b", job_b, pairs_of(b))
    assert other == "a"
    ends_a, frame_a = measure_all_to_alls(links, *job_a)
    ends_b, frame_b = measure_all_to_alls(links, *job_b)
    assert ends_a == ends_b
    renamed = renamed_stats(frame_a, links, sig_a, sig_b)
    pd.testing.assert_frame_equal(renamed, frame_b)
    assert set(renamed["link"]).isdisjoint(frame_a["link"])      # the other group's links


def test_other_traffic_or_another_shape_is_not_a_twin():
    links = LinkTable(load_topology("h800-64"))
    traffic = route_tokens(MoERouting(ep=16, gpus_per_node=8, num_experts=32, topk=4, tokens_per_gpu=256))
    heavier = route_tokens(MoERouting(ep=16, gpus_per_node=8, num_experts=32, topk=4, tokens_per_gpu=512))
    rest = (7168.0, "hierarchical", "dispatch", 4, 0.0, None)
    classes = TwinJobs(links)
    classes.twin_of("a", ([(list(range(16)), traffic)], *rest), pairs_of(range(16)))
    assert classes.twin_of("heavier", ([(list(range(16, 32)), heavier)], *rest), pairs_of(range(16, 32))) is None
    twin = classes.twin_of("combine", ([(list(range(16, 32)), traffic)], 7168.0, "hierarchical", "combine", 4, 0.0,
                                       None), pairs_of(range(16, 32)))
    assert twin is None                                            # another shape: another class


def test_a_link_off_the_routes_means_measure_the_twin_itself():
    links = LinkTable(load_topology("h800-64"))
    a, b = list(range(16)), list(range(16, 32))
    sig_a, sig_b = links.routes(pairs_of(a)), links.routes(pairs_of(b))
    frame = pd.DataFrame({"link": ["n9/gpu0->n9/nic0"], "src": ["n9/gpu0"], "dst": ["n9/nic0"], "bytes": [1.0]})
    assert renamed_stats(frame, links, sig_a, sig_b) is None
