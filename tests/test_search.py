"""sim.training.search and ``python -m sim search-schedule``: the surrogate against the full step, the
search's answer reproduced by the full step, the same seed the same orders, bad input in one line."""
import json
import random

import pytest

from sim.checks import InputError
from sim.schedules import make_schedule, validate
from sim.training.model.specs import SpecError, load_scenario
from sim.training.scenario import Scenario
from sim.training.search import Surrogate, climb, one_microbatch_gb, search_schedules
from sim.training.step import MoEStep


@pytest.fixture(scope="module")
def tiny():
    return Scenario(load_scenario("tiny"))


@pytest.mark.parametrize("kept", [False, True])
def test_the_surrogate_times_the_start_as_the_full_step_does(tiny, kept):
    """Ops alone on their ranks, sends alone on the fabric, the start's tails: within 2% of the full
    step for the named orders (what it leaves out is sends meeting on a GPU); its memory the full
    model's, with the stages' kept outputs too (``stage_outputs_kept``)."""
    for name in ("zb-1p", "dualpipe", "1f1b"):
        sc = tiny.with_schedule(name)
        sc = Scenario(sc.run.with_(stage_outputs_kept=True)) if kept else sc
        step = MoEStep(sc)
        named = step.simulate()
        surrogate = Surrogate(step, named)
        assert surrogate.time(sc.schedule) == pytest.approx(named.step_time_s, rel=0.02)
        assert surrogate.bound(sc.schedule) <= surrogate.time(sc.schedule)
        memory = [surrogate.rank_memory_gb(sc.schedule, r) for r in range(sc.run.pp)]
        assert memory == pytest.approx([m.total_gb for m in sc.memory])


def test_the_answer_is_the_full_steps_and_never_worse(tiny, tmp_path):
    results = search_schedules(tiny, 80.0, budget=600, seed=3, starts=("dualpipe", "1f1b"))
    for r in results:
        assert r.best_step_s <= r.named_step_s
        assert r.best_memory_gb <= 80.0
        validate(r.order)
        again = MoEStep(tiny.with_schedule(r.schedule).with_order(r.order)).simulate()
        assert again.step_time_s == r.best_step_s          # what the full step gives, to the last digit
    by_start = {r.start: r for r in results}
    assert by_start["1f1b"].best_step_s < by_start["1f1b"].named_step_s    # 1F1B leaves room to win
    # The order written out runs again as a schedule file of the scenario.
    path = tmp_path / "order.json"
    path.write_text(json.dumps(by_start["1f1b"].order.to_json()))
    from_file = MoEStep(Scenario(load_scenario("tiny", schedule=str(path)))).simulate()
    assert from_file.step_time_s == by_start["1f1b"].best_step_s


def test_same_seed_same_orders(tiny):
    a = search_schedules(tiny, 80.0, budget=500, seed=7, starts=("dualpipev",))[0]
    b = search_schedules(tiny, 80.0, budget=500, seed=7, starts=("dualpipev",))[0]
    assert a.order.ranks == b.order.ranks and a.best_step_s == b.best_step_s and a.moves_kept == b.moves_kept


def test_the_climb_keeps_memory_within_the_limit(tiny):
    """A limit just above the start's fullest rank: every order the climb reports fits it."""
    sc = tiny.with_schedule("1f1b")
    step = MoEStep(sc)
    surrogate = Surrogate(step, step.simulate())
    start = max(surrogate.rank_memory_gb(sc.schedule, r) for r in range(sc.run.pp))
    found = climb(sc.schedule, surrogate, start + 1e-6, 800, random.Random(1))
    assert max(surrogate.rank_memory_gb(found.order, r) for r in range(sc.run.pp)) <= start + 1e-6
    assert found.cost <= surrogate.time(sc.schedule)


def test_zb_starts_at_the_most_micro_batches_that_fit(tiny):
    results = search_schedules(tiny, 4.2, budget=100, starts=("zb",))
    n = float(results[0].schedule.split("=")[1])
    assert results[0].named_memory_gb <= 4.2 and n >= 1


@pytest.mark.parametrize("kwargs,pattern", [
    ({"memory_limit_gb": 1.0}, r"memory limit 1 GB is below what one micro-batch needs: \d+\.\d GB on the fullest"),
    ({"memory_limit_gb": 0}, r"memory limit \(GB\) must be a finite number in \(0, 1,000,000\], got 0"),
    ({"budget": 0}, r"search budget \(moves tried per start\) must be an integer in \[1, 10,000,000\], got 0"),
    ({"seed": -1}, r"seed must be an integer in \[0, .*\], got -1"),
    ({"starts": ()}, "name at least one schedule"),
])
def test_bad_input_is_one_line(tiny, kwargs, pattern):
    args = {"memory_limit_gb": 80.0, "budget": 10, "seed": 0, **kwargs}
    with pytest.raises(InputError, match=pattern) as err:
        search_schedules(tiny, **args)
    assert "\n" not in str(err.value)


def test_one_micro_batch_is_the_floor(tiny):
    need = one_microbatch_gb(tiny)
    assert need > max(m.total_gb - m.activations_gb for m in tiny.memory)


def test_another_shape_of_order_is_refused(tiny):
    with pytest.raises(SpecError, match="has another shape"):
        tiny.with_order(make_schedule("1f1b", 4, 6))
    with pytest.raises(SpecError, match="has pp=2, the run pp=4: a schedule file is for one shape of run"):
        path = "/tmp/_two_ranks.json"
        with open(path, "w") as fh:
            json.dump(make_schedule("1f1b", 2, 8).to_json(), fh)
        Scenario(load_scenario("tiny", schedule=path))


def test_the_surrogate_under_post_validation(tiny):
    """optimizer_sync bypass: each rank's own span; the surrogate times the start as the step does."""
    sc = Scenario(load_scenario("tiny", schedule="zb-2p", optimizer_sync="bypass"))
    step = MoEStep(sc)
    named = step.simulate()
    surrogate = Surrogate(step, named)
    assert surrogate.time(sc.schedule) == pytest.approx(named.step_time_s, rel=0.02)
    assert surrogate.bound(sc.schedule) <= surrogate.time(sc.schedule)


@pytest.mark.parametrize("limit", [1.405, 1.400])
def test_a_start_that_does_not_fit_is_marked_or_replaced_by_one_that_does(tiny, limit):
    """1F1B's fullest rank needs 1.41 GB, above the limit (one micro-batch fits): the search answers
    either that start, marked infeasible, or an order whose every rank fits, rerun by the full step."""
    r = search_schedules(tiny, limit, budget=400, seed=1, starts=("1f1b",))[0]
    assert r.named_memory_gb > limit
    if r.best_memory_gb > limit:
        assert r.note == (f"1f1b itself needs {r.named_memory_gb:.2f} GB, above the {limit:g} GB limit; "
                          "infeasible: no order found fits, the start is reported")
        assert r.order.ranks == tiny.with_schedule("1f1b").schedule.ranks and r.best_step_s == r.named_step_s
    else:
        again = MoEStep(tiny.with_schedule("1f1b").with_order(r.order)).simulate()
        assert all(rank.memory.total_gb <= limit for rank in again.ranks) and r.note.endswith("a searched order fits")


def test_the_zero_bubble_start_takes_the_whole_micro_batches_below_a_fractional_limit(tiny):
    """A limit that leaves room for 2.5 micro-batches of activations beyond the fixed memory: the
    zb start runs zb-auto with N = 2 (the whole number below), and every rank fits."""
    from sim.training.model.memory import stage_activation_bytes
    from sim.training.search import zb_start
    probe = tiny.with_schedule("1f1b")
    unit = max(f for f, _ in stage_activation_bytes(probe.model, probe.run, probe.chunk.layers_per_stage)[:2]) / 1e9
    fixed = max(m.total_gb - m.activations_gb for m in probe.memory)
    start = zb_start(tiny, fixed + 2.5 * unit)
    assert start.run.schedule == "zb-auto" and start.run.zb_memory_limit == 2
    assert max(m.total_gb for m in start.memory) <= fixed + 2.5 * unit
