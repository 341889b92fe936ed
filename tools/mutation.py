"""Mutation testing of the core modules with mutmut; one score per module -> results/mutation.csv.

mutmut (3.x) was chosen over cosmic-ray because it needs no session database or worker setup, runs
only the tests that reach the mutated function (collected from one instrumented run), and keeps
its results per source file (``mutants/**/*.meta``), so a run can be resumed module by module.
Configuration: ``[tool.mutmut]`` in pyproject.toml (which modules, which tests). The numba-compiled
kernels (:data:`KERNELS`, with :mod:`sim.network.jitcache`, which guards their caches) are left
out there because numba cannot compile mutmut's function wrappers; ``--kernels`` mutates them in a
tree of their own (:func:`kernel_tree`, ``.mutation-kernels/``) with compilation off, judged by
their own tests (numpy oracles, hypothesis).

``python -m tools.mutation [MODULE ...]`` runs the mutants of the given modules (dotted, e.g.
``sim.engine``; default every core module: about 7,100 mutants, many hours on 2 cores; the kernels
about 3,600), then writes the table from every result mutmut holds. ``--sample N`` runs a seeded sample of N mutants per
module. ``--report`` only writes the table.
``--kernels`` does any of this for the compiled kernels; the table always holds both trees.
``--recheck-timeouts`` runs every mutant mutmut recorded as a timeout again, alone and with a
generous limit: on a busy machine a surviving mutant's slow run can pass for a timeout (killed).
``--recheck-survivors`` does the same for the survivors of the modules named (default: all): mutmut
runs its workers forked from one process, and a few mutants it recorded as survivors fail their
tests when run alone, in a fresh interpreter. A recheck runs the tests mutmut's map lists for the
mutant's function; ``--tests FILE ...`` adds test files written since that map was built (tests
added to kill survivors, which the map cannot list yet).
``--sample N --tests FILE ...`` runs the sample's mutants one at a time against those files only
(for a module whose mapped tests reach Dask sweeps that a mutant can hang): a score of those tests.

Score = killed / (checked - equivalent). Equivalent mutants (no output can change) are listed in
:data:`EQUIVALENT` with the reason, instead of a test that cannot exist.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from experiments.common import script_main
from sim.checks import InputError, arg
from sim.io import write_csv_atomic

CORE = ("sim.engine", "sim.schedules", "sim.network", "sim.training.costs.streams", "sim.training.runner",
        "sim.training.costs.chunk", "sim.training.model.memory", "sim.sweep", "sim.training.comm.live",
        "sim.training.comm.kernels", "sim.training.comm.calibrate", "sim.training.model.hfconfig",
        "sim.training.model.recipe", "sim.training.reports.runpage", "sim.sweep_rows",
        "sim.training.comm.collective_shapes", "sim.training.comm.model_parallel", "sim.training.model.layout",
        "sim.training.model.activations", "sim.training.model.recompute", "sim.compute.gemm", "sim.compute.attention",
        "sim.compute.fit", "sim.compute.kernels", "sim.compute.ops", "sim.compute.device", "sim.compute.tables",
        "sim.compute.gemm_table", "sim.plan_recipes", "sim.plan_search", "sim.cluster", "sim.jobs", "sim.plan_screen",
        "sim.training.comm.sends")
# The numba-compiled kernels: mutated in a tree of their own (--kernels), run as Python.
KERNELS = ("sim.network.fairshare.oracle", "sim.network.fairshare.heap", "sim.network.fairshare.filling",
           "sim.network.fairshare.scan", "sim.network.fairshare.step", "sim.network.fairshare.refill",
           "sim.network.fairshare.tallies", "sim.network.fairshare.records", "sim.network.traffic",
           "sim.network.links", "sim.network.jitcache")
KERNEL_TREE = Path(".mutation-kernels")
KERNEL_CONFIG = """[tool.mutmut]
# tools/mutation.py --kernels: the numba-compiled kernels, run as Python (NUMBA_DISABLE_JIT=1),
# judged by their own tests (numpy oracles, hypothesis, hand-worked cases) and the fabric's.
source_paths = ["sim/"]
only_mutate = ["sim/network/fairshare/oracle.py", "sim/network/fairshare/heap.py", "sim/network/fairshare/filling.py",
               "sim/network/fairshare/scan.py", "sim/network/fairshare/step.py", "sim/network/fairshare/refill.py",
               "sim/network/fairshare/tallies.py", "sim/network/fairshare/records.py", "sim/network/traffic.py",
               "sim/network/links.py", "sim/network/jitcache.py"]
do_not_mutate = ["*/__init__.py"]
also_copy = ["topologies/", "experiments/", "validation/", "examples/", "docs/", "tools/", "README.md", "Makefile"]
pytest_add_cli_args_test_selection = ["tests/test_fairshare_filling.py", "tests/test_fairshare_scan.py",
                                      "tests/test_fairshare_step.py", "tests/test_fairshare_refill.py",
                                      "tests/test_fairshare_tallies.py", "tests/test_fairshare_records.py",
                                      "tests/test_traffic.py", "tests/test_fabric.py",
                                      "tests/test_flowloop.py", "tests/test_links.py", "tests/test_jitcache.py"]
pytest_add_cli_args = ["-p", "no:cacheprovider"]
"""

EQUIVALENT = {
    "sim.training.model.activations.x_head_tensors__mutmut_6": "the head's keeps never read the recipe's `full`: "
                                                               "None and False alike",
    "sim.training.model.memory.x_stage_activation_bytes__mutmut_107": "`group` is 1.0 unless every layer is fully "
                                                                      "recomputed, so `or True` changes no product",
    "sim.training.model.memory.x_working_set__mutmut_31": "tokens_per_microbatch is a multiple of cp (seq_len of "
                                                          "2 cp, checked), so / and // give the same T",
    "sim.training.model.memory.x_working_set__mutmut_53": "a dense model's layer read as MoE keeps no dense MLP "
                                                          "and no experts: never the larger of the two",
    **{name: "'cast' is (1 kernel, x1.0) in ops.UNFUSED, as a kind it does not list"
       for name in ("sim.compute.ops.x_mlp_ops__mutmut_97", "sim.compute.ops.xǁ_Blockǁgemm__mutmut_51")},
    "sim.compute.ops.x_embedding_ops__mutmut_8": "the embedding's eager entry is (1 kernel, x1.0), as fused",
    **{f"sim.training.costs.chunk.xǁChunkModelǁkernel_costs__mutmut_{i}": "the memo of a layer's kernels: a key "
       "spelt otherwise or of the other form stays apart from every other (the costs on all SMs are always asked with "
       "sms None, those beside a communication kernel with its SMs), and no memo costs the same kernels again: the "
       "same seconds, more time" for i in (13, 15, 16, 18, 19, 20, 21, 22, 23)},
    "sim.training.costs.chunk.x_ring_chunked__mutmut_1": "at tp 1 the one chunk is the whole GEMM (m / 1 rows, all "
                                                         "its FLOPs): the same cost, and tp is never below 1",
    "sim.training.costs.chunk.xǁChunkModelǁ_kernel_parts__mutmut_37": "a layer's MLP parts never sum to 0 s (its "
                                                                      "norm at least): the guard is never taken",
    **{f"sim.training.costs.chunk.xǁChunkModelǁlayer_cost__mutmut_{i}": "the GEMMs TP overlap pairs read a layer "
       "without its extra GEMM (an MTP layer's projection, a GEMM of its own): the same pairs" for i in (81, 83)},
    "sim.compute.ops.x_head_ops__mutmut_2": "only 'unfused' is looked at: any other default spelling is fused",
    **{f"sim.compute.ops.x_head_ops__mutmut_{i}": "the head block's shape is read only for its precision, fusion "
       "and weight-gradient bytes: its sizes, heads, tokens and TP are never read" for i in
       (11, 12, 13, 14, 15, 16, 17, 27, 31, 32, 33, 34)},
    **{f"sim.compute.ops.xǁ_Blockǁgemm__mutmut_{i}": "'grad_add' is one kernel at x1.0 fused or not (ops.UNFUSED "
       "does not list it, nor its name): any kind or fusion gives the same op" for i in (186, 187, 204, 205)},
    "sim.compute.ops.x_mlp_ops__mutmut_13": "an op without a kind is looked up by its name, here 'norm' too",
    "sim.compute.fit.x_calibrate__mutmut_6": "read_yaml's default error class is InputError, the one passed",
    "sim.compute.fit.x__attention__mutmut_36": "a kernel under `also` needs the family's own table, where the "
                                               "GPUs are never read",
    **{f"sim.compute.kernels.x__attention_model__mutmut_{n}": "the default of a fitted attention's missing "
       "source: every entry calibrate writes carries its source, so the default is never read" for n in (35, 37, 40)},
    "sim.compute.kernels.x__family__mutmut_26": "an `also` kernel is fitted to the family's own table (calibrate "
                                                "refuses it otherwise), so its per_peak is None and the GPU unread",
    "sim.compute.kernels.xǁKernelModelǁcost__mutmut_119": "an attention call whose work equals its launch to the "
                                                          "last bit (then labelled compute, not launch): no shape "
                                                          "reaches it; the label only",
    **{f"sim.compute.attention.xǁAttentionFitǁrate__mutmut_{n}": "seq_len and head_dim meet the float s0 and d0 "
       "in their first sum, so the dtype they were read as never reaches the rate (sizes are far below int64's range)"
       for n in (3, 5, 7, 9)},
    **{f"sim.compute.attention.xǁAttentionFitǁseconds__mutmut_{n}": "the FLOPs are divided by a float rate at once: "
       "the dtype they were read as never reaches the time" for n in (7, 9)},
    "sim.compute.tables.x__rows__mutmut_4": "encoding=None reads with the locale's encoding, UTF-8 where the tests "
                                            "run (a different locale is no test's to set)",
    "sim.compute.tables.x__rows__mutmut_6": "'UTF-8' and 'utf-8' name the same codec",
    "sim.compute.gemm_table.xǁGemmCorrectionǁlog_factor__mutmut_3": "the memo only: every shape is computed again "
                                                                  "and gives the same value",
    "sim.compute.gemm_table.xǁGemmCorrectionǁ_log_factor__mutmut_11": "`<=` and `<` at 1e-9 octaves differ only "
                                                                    "for a shape exactly that far from a row",
    "sim.compute.gemm_table.x_correction_of__mutmut_45": "1e12 + 1: the residuals of memory-bound rows move by one "
                                                         "part in 1e12",
    "sim.compute.gemm_table.x_family_corrections__mutmut_6": "read_yaml's error class is InputError by default",
    "sim.compute.gemm.x_gemm_bound__mutmut_43": "memory against the compute time less 1e-15 s: `>=` and `>` differ only "
                                                "when the two are equal to the last bit after that slack; the label only",
    **{f"sim.network.nccl.x_ring_cost__mutmut_{i}": "1e9 -> 1000000001.0 B/GB moves one candidate's estimate by "
       "1e-9 (the tree's, the rings', NVLS's): only an exact tie between two could flip" for i in (85, 140, 177)},
    "sim.training.model.layout.x_divisors__mutmut_7": "range(1, n + 2): n + 1 never divides n >= 1",
    "sim.training.model.layout.xǁLayoutǁcheck__mutmut_5":
        "kv_heads 1 by default: 1 % tp and tp % 1 == 0, never refused, as 0",
    "sim.training.model.layout.xǁLayoutǁcheck__mutmut_22": "mp >= 1: at mp 1 block % 1 is 0 and the check never fires",
    "sim.training.model.layout.xǁLayoutǁcheck__mutmut_38": "mp >= 1: at mp 1 block % 1 is 0 and the check never fires",
    "sim.training.model.layout.xǁLayoutǁcheck__mutmut_39":
        "mp > 2: at mp 2 expert TP above 1 means TP 2 = expert TP 2, an even "
                                               "block; expert TP 1 meets the folding check first",
    "sim.training.model.activations.x_linear_shapes__mutmut_9": "a column-parallel Linear's name is read only by the "
                                                     "ROW_PARALLEL lookup, which it is not in either way",
    "sim.training.model.activations.x_linear_shapes__mutmut_10": "same as mutmut_9 (qkv spelt in capitals)",
    "sim.training.model.activations.x_linear_shapes__mutmut_28": "same as mutmut_9 (q_up, column-parallel)",
    "sim.training.model.activations.x_linear_shapes__mutmut_29": "same as mutmut_9 (q_up in capitals)",
    "sim.training.model.activations.x_linear_shapes__mutmut_80": "same as mutmut_9 (routed_up, column-parallel)",
    "sim.training.model.activations.x_linear_shapes__mutmut_81": "same as mutmut_9 (routed_up in capitals)",
    "sim.training.model.activations.x_linear_shapes__mutmut_88":
        "routed_down out of ROW_PARALLEL: its shares swap between 1/tp "
                                                      "and the wide share, which is 1/tp too under sequence "
                                                      "parallelism, the only way an MoE model runs with TP",
    "sim.training.model.activations.x_linear_shapes__mutmut_89": "same as mutmut_88 (routed_down in capitals)",
    "sim.training.model.activations.x_mlp_tensors__mutmut_12":
        "a saved tensor's name is a label; split_of reads None as "
                                                    "'sp', mlp.norm_input's own split",
    "sim.training.model.activations.x_mlp_tensors__mutmut_111":
        "routed.input's name None: split_of reads None as 'sp', "
                                                     "routed.input's own split",
    "sim.training.model.activations.x_mlp_tensors__mutmut_118":
        "routed.input misspelt: split_of reads an unknown name as 'sp', "
                                                     "routed.input's own split",
    "sim.training.model.activations.x_mlp_tensors__mutmut_119": "same as mutmut_118 (in capitals)",
    "sim.training.model.activations.x_mlp_tensors__mutmut_134":
        "the routed experts' names only choose their split, 'tp' or "
                                                     "'sp', alike under sequence parallelism, the only way an MoE "
                                                     "model runs with TP (Layout.check)",
    "sim.training.model.activations.x_mlp_tensors__mutmut_135": "same as mutmut_134 (routed in capitals)",
    "sim.training.reports.runpage.x_build_run_page__mutmut_21":
        "the default 'measured' spelt otherwise: captions() tests == 'live' only",
    "sim.training.reports.runpage.x_build_run_page__mutmut_22":
        "the default 'measured' spelt otherwise: captions() tests == 'live' only",
    "sim.training.reports.runpage.x_captions__mutmut_18":
        "groupby(sort=None): pandas reads None as False, the same order",
    "sim.training.reports.runpage.x_conclusion__mutmut_3":
        "sort kind None (quicksort): numpy sorts under 16 rows by insertion, "
                                              "stable; a page has one row per schedule",
    "sim.training.reports.runpage.x_conclusion__mutmut_5": "sort kind default (quicksort): stable under 16 rows, as _3",
    "sim.training.reports.runpage.x_conclusion__mutmut_9": "sort kind 'STABLE': pandas lower-cases the kind",
    "sim.training.reports.runpage.x_summary_table__mutmut_3": "as conclusion _3",
    "sim.training.reports.runpage.x_summary_table__mutmut_5": "as conclusion _5",
    "sim.training.reports.runpage.x_summary_table__mutmut_9": "as conclusion _9",
    "sim.engine.x__per_stage__mutmut_24": "upper bound 1e12 -> 1e12 + 1: no cost lies between",
    "sim.schedules.timing.x_inputs_of__mutmut_14": "W then waits for F(mb,s) and G(mb,s+1): its own I, earlier on "
                                                   "the same rank, already waited for both (the validator keeps I "
                                                   "before W)",
    "sim.schedules.timing.x_inputs_of__mutmut_15": "same as mutmut_14 (the kind compared with 'w')",
    "sim.schedules.timing.x_outputs_of__mutmut_12": "a B also publishes key I(mb,s), which only a W reads, and a B "
                                                    "has no W",
    "sim.schedules.timing.x_rank_ends__mutmut_19": "the order the ranks are started in changes only the order ops "
                                                   "are timed in (record), not any time: every rank is advanced "
                                                   "as far as its inputs allow either way",
    "sim.schedules.timing.x_rank_ends__mutmut_20": "same as mutmut_19",
    "sim.engine.x_start_schedule__mutmut_7": "the start position is overwritten before a rank's first op waits",
    "sim.engine.x_start_schedule__mutmut_35": "outputs_of does not use num_stages",
    "sim.schedules.timing.x_inputs_of_exchange__mutmut_10": "outputs_of does not use num_stages",
    # ZB-V: in the steady loop f0 >= f1 >= b1 >= b0, so min(f0, f1, b0, b1) is b0 and dropping another
    # term changes nothing; counters assigned from 0 are the same as incremented from 0; one more
    # iteration once b0 = M makes only ops of micro-batches >= M (dropped); b0 ends >= M either way.
    "sim.schedules.zerobubble.x_zbv__mutmut_76": "f1 is 0 there: f1 = r equals f1 += r",
    "sim.schedules.zerobubble.x_zbv__mutmut_114": "b1 is 0 there: b1 = P - r equals b1 += P - r",
    "sim.schedules.zerobubble.x_zbv__mutmut_125": "min without f0: b0 is the minimum",
    "sim.schedules.zerobubble.x_zbv__mutmut_126": "min without f1: b0 is the minimum",
    "sim.schedules.zerobubble.x_zbv__mutmut_128": "min without b1: b0 is the minimum",
    "sim.schedules.zerobubble.x_zbv__mutmut_129": "an extra iteration at b0 = M makes no op of a real micro-batch",
    "sim.schedules.zerobubble.x_zbv__mutmut_245": "b0 ends >= M, so min(b0, M) = M for both",
    "sim.schedules.ops.x_op_from_json__mutmut_26": "bound 1e9 -> 1e9 + 1: no op lies between",
    "sim.schedules.dualpipe.x_eight_step_program__mutmut_32": "ops is empty there: = and += give the same list",
    "sim.schedules.dualpipe.x_eight_step_program__mutmut_119": "deferred is only tested for truth: None is False",
    # hfconfig: ModelSpec turns an integral float into an int, so / gives the same spec as // where
    # the division is exact (checked before, or hidden a multiple of heads); a sliding count that no
    # output reads without a window; the file read as UTF-8 however the encoding is spelt (this
    # machine's locale is UTF-8 too).
    "sim.training.model.hfconfig.x__gpt2__mutmut_52":
        "hidden / heads: n_embd is checked a multiple of n_head; int in ModelSpec",
    "sim.schedules.zbauto.xǁStageCostsǁcheck__mutmut_71": "> and >= differ only at an imbalance of exactly "
                                                          "the tolerance",
    "sim.training.model.hfconfig.x_config_fields__mutmut_75":
        "hidden / heads: checked a multiple just before; int in ModelSpec",
    "sim.training.model.hfconfig.x__qwen_moe__mutmut_86":
        "shared / expert size: checked a whole multiple; int in ModelSpec",
    "sim.training.model.hfconfig.x__not_costed__mutmut_24": "the sliding count is read only when there is a window",
    "sim.training.model.hfconfig.x__not_costed__mutmut_25": "the sliding count is read only when there is a window",
    "sim.training.model.hfconfig.x_read_config__mutmut_4": "encoding None: the locale's, UTF-8 here",
    "sim.training.model.hfconfig.x_read_config__mutmut_6": "'UTF-8' and 'utf-8' name one codec",
    "sim.training.costs.chunk.x__read_profile__mutmut_8": "encoding None: the locale's, UTF-8 here",
    "sim.training.costs.chunk.x__read_profile__mutmut_10": "'UTF-8' and 'utf-8' name one codec",
    "sim.schedules.dualpipe.x_eight_step_program__mutmut_126": "h is odd there, so (h + 1) / 2 == (h + 1) // 2",
    "sim.schedules.dualpipe.x_eight_step_program__mutmut_128": "h is odd there, so (h + 2) // 2 == (h + 1) // 2",
    "sim.training.model.memory.x_activation_peak__mutmut_29": "without stage_layers the forward counts one layer, so "
                                                          "the unit has one pair whatever the backward's count",
    "sim.training.model.memory.x_fixed_terms__mutmut_2": "working_bytes' default is never read: the one call "
                                                         "without it (step_end) returns before",
    "sim.training.model.memory.x_stage_output_bytes__mutmut_5": "tokens_per_microbatch is a multiple of cp: "
                                                                "/ and // give the same count",
    "sim.training.model.memory.x_memory_per_rank__mutmut_130": "at_end equals act only when both are 0 (no kept "
                                                               "outputs, no activations), the walk's count then 0 too",
    "sim.training.model.memory.x_memory_per_rank__mutmut_161": "at equal bytes the step's end cannot win: its fixed "
                                                               "terms are a subset of the walk's",
    "sim.training.model.memory.x_memory_per_rank__mutmut_179": "at equal totals either peak reports the same "
                                                               "total; they meet only by a coincidence of floats",
    "sim.training.model.memory.x_memory_per_rank__mutmut_173": "bytes / (1e9 + 1) for GB: 1e-9 relative",
    "sim.training.model.memory.x_memory_per_rank__mutmut_177": "bytes / (1e9 + 1) for GB: 1e-9 relative",
    "sim.training.model.memory.x_memory_per_rank__mutmut_182": "bytes / (1e9 + 1) for GB: 1e-9 relative",
    "sim.training.costs.chunk.x_mla_up_projection_params__mutmut_7": "the query up-projection's formula is 0 when "
                                                           "q_lora_rank is 0: the guard only saves a product",
    "sim.network.stats.x_link_stats__mutmut_48": "pandas applies the sort kind only when sorting by one column "
                                                 "(here two: bytes, link)",
    "sim.network.stats.x_link_stats__mutmut_51": "same as mutmut_48 (the kind left to its default)",
    "sim.network.stats.x_link_stats__mutmut_58": "same as mutmut_48 (pandas does not even read the kind)",
    "sim.network.stats.x_link_stats__mutmut_59": "same as mutmut_58",
    "sim.training.costs.streams.x_walk_op__mutmut_1":
        "record's default: both callers (run_op, the live runner) pass it",
    "sim.training.costs.streams.x_walk_op__mutmut_80": "np.where(None, shared, full) is full: no kernel beside "
                                                       "the part, as when the test is kept",
    "sim.training.costs.streams.x_walk_op__mutmut_65":
        "a communication lane's ends never decrease, so a kernel that ended "
                                            "at the earliest start is followed only by kernels that ended no later, "
                                            "none of which any GPU's start falls inside",
    "sim.training.costs.streams.x__walk_one__mutmut_3":
        "a part waits only for parts visited before it, so every end is written "
                                             "before it is read: the compute stream's first values are never read",
    "sim.training.costs.streams.x__walk_one__mutmut_5": "the same for the communication stream's first values",
    "sim.schedules.registry.x__check_group__mutmut_12": "the least group is looked for up to M + 1 instead of M: "
                                                        "G = M always qualifies (M mod M = 0), so the search ends "
                                                        "before",
    "sim.schedules.registry.x_check_arguments__mutmut_112": "only interleaved-1f1b and combined-1f1b take chunks "
                                                           "other than None or 1, and max(chunks or 1, 2) is 2 for both",
    # The timeline's first rates: never read, since _add returns while no link is active.
    "sim.network.timeline.xǁLinkTimelineǁ__init____mutmut_20": "the empty first _active is only asked its size",
    "sim.network.timeline.xǁLinkTimelineǁ__init____mutmut_22": "same as mutmut_20",
    "sim.network.timeline.xǁLinkTimelineǁ__init____mutmut_24": "the first _rates is never read (no active link)",
    "sim.network.timeline.xǁLinkTimelineǁ__init____mutmut_26": "same as mutmut_24",
    "sim.network.timeline.xǁLinkTimelineǁ_add__mutmut_2": "an empty interval adds nothing (every overlap is 0)",
    "sim.network.timeline.xǁLinkTimelineǁ_add__mutmut_8": "t0 / bin_s differs from t0 // bin_s only when it "
                                                         "rounds up to an integer; the bin skipped then "
                                                         "overlaps by at most a rounding error",
    "sim.network.timeline.xǁLinkTimelineǁ_add__mutmut_14": "same as mutmut_8 for the last bin: one more bin, "
                                                          "whose overlap is not positive",
    "sim.network.timeline.xǁLinkTimelineǁ_add__mutmut_15": "t1 <= bin_s x max_bins, so the last bin is at most "
                                                          "max_bins, reached only when its overlap is 0",
    "sim.network.timeline.xǁLinkTimelineǁ_add__mutmut_19": "bins before the first overlap by at most 0 "
                                                          "and are skipped",
    "sim.network.timeline.xǁLinkTimelineǁ_add__mutmut_22": "the bin after the last overlaps by at most 0",
    "sim.network.timeline.xǁLinkTimelineǁ_add__mutmut_37": "an overlap of 0 adds nothing",
    "sim.training.runner.xǁGroupRunnerǁ_run_live__mutmut_27": "an all-to-all launched now also waits 0 s first: one "
                                                          "more event, the same times",
    "sim.training.runner.xǁGroupRunnerǁ_send__mutmut_57": "numpy reads a sort kind case-insensitively: 'STABLE' is "
                                                      "'stable'",
    "sim.training.runner.xǁGroupRunnerǁ_send__mutmut_79": "differs only for a send late by exactly 1e-12 s",
    "sim.training.runner.xǁGroupRunnerǁ_send__mutmut_88": "a send due now handed to transfer_at, which starts a send "
                                                      "that is not after now with transfer itself, credited "
                                                      "at - max(due, now) = 0 s",
    "sim.training.runner.xǁGroupRunnerǁ_send_all__mutmut_5": "differs only for a send late by exactly 1e-12 s",
    "sim.training.runner.xǁGroupRunnerǁ_send_all__mutmut_14": "a representative send due now also waits 0 s first: one "
                                                          "more event, the same times",
    "sim.training.runner.xǁGroupRunnerǁ_plan__mutmut_12": "without the plan cache every op's plan is built again: the "
                                                     "same plans, slower",
    "sim.training.runner.xǁGroupRunnerǁ_plan__mutmut_13": "same as mutmut_12 (a cache that never hits)",
    "sim.training.runner.xǁGroupRunnerǁ_run_one__mutmut_94": "outputs_of does not use num_stages",
    "sim.training.runner.xǁGroupRunnerǁ_run_one__mutmut_131": "an op that ends now also waits 0 s: one more event, the "
                                                         "same times",
    "sim.training.runner.xǁGroupRunnerǁ_run_group__mutmut_118": "outputs_of does not use num_stages",
    "sim.training.runner.xǁGroupRunnerǁ_run_group__mutmut_160": "an op that ends now also waits 0 s: one more event, the "
                                                           "same times",
    "sim.training.runner.xǁGroupRunnerǁ_compiled__mutmut_5": "only a tag: an FB unit's work tuple (5 items) never "
                                                         "equals a plain op's (3 items)",
    "sim.training.runner.xǁGroupRunnerǁ_grid__mutmut_1": "without the cache each call works the same grid out again",
    "sim.training.runner.xǁGroupRunnerǁ_grid__mutmut_2": "a cache key that never hits (None): each call works the "
                                                     "same grid out again",
    "sim.network.fabric.xǁFabricǁroute_bandwidth__mutmut_7": "the GPU check with 1 byte instead of 0: both sizes "
                                                              "are valid",
    "sim.network.fabric.xǁFabricǁroute_bandwidth__mutmut_11": "a route cache key that never hits (None): the "
                                                               "route is looked up again, the same",
    "sim.training.runner.xǁGroupRunnerǁ_plan__mutmut_4": "the plan cache's key for an F&B unit only has to differ from "
                                                    "a single op's (kind, stage): any first word does",
    "sim.training.runner.xǁGroupRunnerǁ_plan__mutmut_5": "same as mutmut_4",
    "sim.training.comm.live.xǁLiveCommǁ_bundle__mutmut_2":
        "the representative's runner always asks for group 0: its cache "
                                                 "key (shape, stage, 0) stands for the stage as -1 does",
    "sim.training.comm.live.xǁLiveCommǁ_bundle__mutmut_4":
        "-1 -> +1: a cache key only; a LiveComm is representative or not "
                                                 "for its life, so its keys never meet a group's",
    "sim.training.comm.live.xǁLiveCommǁ_bundle__mutmut_5": "same as mutmut_4 (-2)",
    "sim.training.comm.live.xǁLiveCommǁall_to_all__mutmut_29":
        "with no message the data phase takes 0 s alone (nothing on the "
                                                     "wire, no byte for the SMs): overhead - 0 = overhead + 0",
    "sim.training.comm.live.xǁLiveCommǁsend_all__mutmut_1":
        "without the route sets' cache each send builds its set again: "
                                                  "the same routes, slower",
    "sim.training.comm.live.xǁLiveCommǁsend_all__mutmut_2": "same as mutmut_1 (a cache that never hits)",
    "sim.network.collectives.x__dispatch_unit__mutmut_10": "_Join's default event=True makes an event nobody "
                                                            "waits for: one more SimPy event, the same times",
    "sim.network.collectives.x__dispatch_unit__mutmut_14": "same as mutmut_10",
    "sim.network.collectives.x__combine_unit__mutmut_16": "same as _dispatch_unit__mutmut_10 (None and False are "
                                                          "both no event)",
    "sim.network.collectives.x__ring__mutmut_102": "a rank's route to itself has no link and 0 s of latency",
    "sim.network.collectives.x__ring__mutmut_1": "bulk's default: every caller passes it but the tree's one-step "
                                                 "rings, where bulk and step by step send the same one transfer",
    "sim.network.collectives.x_nccl_ring_cost__mutmut_100": "float('INF') is float('inf')",
    "sim.network.collectives.x__hierarchical__mutmut_27": "NCCL's latency and protocol shares of an all-gather and "
                                                          "a reduce-scatter are the same (n - 1 steps, N - 1 of them "
                                                          "over the network)",
    "sim.network.collectives.x__hierarchical__mutmut_57": "one node through the rails' branch: its in-node ring, and "
                                                          "rails of one GPU that send nothing",
    "sim.network.collectives.x_nccl_ring_cost__mutmut_102": "the rails' hop latency's default is read only on one "
                                                             "node, where (nodes - 1) x it is 0 and no tree applies",
    "sim.network.collectives.x_nccl_all_reduce__mutmut_10": "two GPUs never take the tree: its latency (LL 16.8 us "
       "over 2 nodes) is above the LL ring's (15.4 us) and its data term 2 S is twice the ring's",
    **{f"sim.network.collectives.x__ring__mutmut_{i}": "kind's default: every caller that takes NCCL's cost (a "
       "protocol) names its kind, and without a protocol kind is never read" for i in (2, 3)},
    **{f"sim.network.collectives.x__ring__mutmut_{i}": "bulk dropped after NCCL's latency: the one caller that "
       "passes both (calibrate's all-reduce in a node) runs one ring alone on a fresh fabric, where the bulk ring "
       "takes its steps' time (test_bulk_ring_takes_the_time_of_its_steps)" for i in (75, 81)},
    "sim.network.collectives.x_hierarchical_reduce_scatter__mutmut_5": "gather=None and gather=False are both the "
                                                                       "reduce-scatter",
    "sim.network.flowloop.xǁFlowLoopǁadd_link__mutmut_10": "private links grown by a third instead of a half: more "
                                                            "growths, the same links and rates",
    "sim.network.flowloop.xǁFlowLoopǁ_activate_pending__mutmut_4": "4 new flows appended as arrays instead of one by "
                                                                   "one: the same arrays (the threshold is only speed)",
    "sim.network.flowloop.xǁFlowLoopǁ_activate_pending__mutmut_5": "5 new flows appended one by one instead of "
                                                                   "as arrays: the same arrays (the threshold is only "
                                                                   "speed)",
    "sim.network.flowloop.xǁFlowLoopǁ_activate_pending__mutmut_49": "np.array of Python ints is int64 by default",
    "sim.network.flowloop.xǁFlowLoopǁ_activate_pending__mutmut_51": "the same as mutmut_49",
    "sim.network.flowloop.xǁFlowLoopǁ_activate_pending__mutmut_65": "the same as mutmut_49",
    "sim.network.flowloop.xǁFlowLoopǁ_activate_pending__mutmut_67": "the same as mutmut_49",
    "sim.network.loads.xǁLinkLoadǁrenamed__mutmut_5": "np.full of a Python int is int64 by default",
    "sim.network.loads.xǁLinkLoadǁrenamed__mutmut_8": "the same as mutmut_5",
    "sim.network.loads.xǁLinkLoadǁrenamed__mutmut_19": "the renaming array one entry longer when every link is 0: "
                                                      "the same names",
    "sim.network.loads.xǁLinkLoadǁrenamed__mutmut_20": "the renaming array one entry longer: the same names",
    "sim.network.loads.xǁLinkLoadǁrenamed__mutmut_22": "an unnamed link marked -2 instead of -1: still below 0, "
                                                      "refused alike",
    "sim.network.fabric.xǁFabricǁtransfer_set__mutmut_14": "1e18 and 1e+18 are the same number",
    "sim.network.api.x_checked_bytes__mutmut_17": "1e18 and 1e+18 are the same number",
    "sim.network.api.x_checked_bytes__mutmut_30": "1e18 and 1e+18 are the same number",
    "sim.network.api.xǁNetworkǁtransfer_bundle__mutmut_1": "a default of the protocol's signature, which no call "
                                                           "reaches: each backend has its own",
    "sim.network.api.x_checked_bytes__mutmut_15": "a float size of 0 then takes the checked path, number(), which "
                                                   "returns the same 0.0",
    "sim.network.api.x_checked_bytes__mutmut_14": "a float size in [0, 1) then takes the checked path, number(), "
                                                   "which returns the same float",
    "sim.network.view.xǁNetworkViewǁ__init____mutmut_10": "numpy makes int64 of a list of ints by default",
    "sim.network.view.xǁNetworkViewǁ__init____mutmut_12": "numpy makes int64 of a list of ints by default",
    "sim.network.view.xǁNetworkViewǁ_own__mutmut_15": "a transfer of 0 bytes then adds 0 to its route's links",
    "sim.network.view.xǁNetworkViewǁtransfer_set__mutmut_1": "a set of 0-byte transfers then adds 0 to their links",
    "sim.network.view.xǁNetworkViewǁ_own__mutmut_13": "a transfer from a GPU to itself has an empty route (no link "
                                                       "to count) and one of 0 bytes adds 0: 'or' counts as 'and' does",
    "sim.jobs.x_run_jobs__mutmut_81": "float('NAN') is float('nan')",
    "sim.plan_screen.x_tail_s__mutmut_62": "a hierarchical reduce-scatter and all-gather alone take the same time "
                                           "(the same rings in reverse order; NCCL's model charges both alike)",
    "sim.network.alone.x_ring_alone_s__mutmut_25": "with one step or no latency, (steps - 1) x latency is 0: the "
                                                   "start the guard gives",
    "sim.network.fabric.xǁFabricǁroute_set__mutmut_13": "_checked is asked about the GPUs here; the byte count it "
                                                        "is given is not used",
    "sim.network.fabric.xǁFabricǁroute_set__mutmut_18": "a route not found in the fabric's cache is found by "
                                                        "_route, which caches it: the same links and latency",
    "sim.network.flowloop.xǁFlowLoopǁ_grow__mutmut_8": "flow arrays grown threefold instead of doubled: larger "
                                                       "arrays, the same flows (as _grow__mutmut_36 for pairs)",
    "sim.network.flowloop.xǁFlowLoopǁ_grow__mutmut_7": "flow arrays grown to exactly what is needed instead of "
                                                       "doubled: more growths, the same flows",
    "sim.network.fabric.xǁFabricǁ_route__mutmut_14": "an engine that cannot bind (its GPU's links take in at most "
                                                     "gpu_rate) added anyway: the same rates; engines are not reported",
    "sim.network.fabric.xǁFabricǁ__init____mutmut_33": "1e18 and 1e+18 are the same number",
    "sim.network.flowloop.xǁFlowLoopǁ_grow__mutmut_21": "growing when the pair arrays are exactly full rather than "
                                                        "over: larger arrays, the same flows and rates",
    "sim.network.flowloop.xǁFlowLoopǁ_grow__mutmut_36": "pair arrays grown threefold instead of doubled: larger "
                                                        "arrays, the same flows and rates",
    "sim.network.fabric.xǁFabricǁ__init____mutmut_80": "an engine exactly as fast as its GPU's links can only tie "
                                                       "with them: the same rates",
    "sim.network.flowloop.xǁFlowLoopǁ__init____mutmut_41": "the scratch marks start at 0 and the tick is raised before "
                                                        "each use: starting it at 1 skips a value, nothing else",
    "sim.network.flowloop.xǁFlowLoopǁ__init____mutmut_44": "_settled is only read when flows are active, and the "
                                                        "first solve sets it",
    "sim.network.flowloop.xǁFlowLoopǁ__init____mutmut_43": "_settled starting None: as falsy as False where read",
    "sim.network.flowloop.xǁFlowLoopǁ__init____mutmut_2": "incremental defaulting to False: Fabric, the loop's only "
                                                          "maker, always passes it",
    "sim.network.flowloop.xǁFlowLoopǁ_activate_pending__mutmut_25": "a new flow's first rate is written by the solve "
                                                                    "that follows before anything reads it",
    "sim.network.flowloop.xǁFlowLoopǁ_grow__mutmut_35": "pair arrays grown to exactly what is needed instead of "
                                                        "doubled: more growths, the same flows",
    "sim.network.fabric.xǁFabricǁ__init____mutmut_41": "astype(None) is float64",
    "sim.network.fabric.xǁFabricǁ_new_flow__mutmut_2": "a route cache that never hits: _route finds the route "
                                                       "again and caches it, the same links and latency",
    "sim.network.loads.xǁLinkLoadǁ__post_init____mutmut_37": "1e18 and 1e+18 are the same number",
    "sim.network.loads.xǁLinkLoadǁempty__mutmut_10": "LinkLoad makes its links int64 whatever it is given",
    "sim.network.loads.xǁLinkLoadǁempty__mutmut_12": "same as mutmut_10",
    # The compiled kernels (--kernels).
    "sim.network.fairshare.step.x_drop_finished__mutmut_89": "a done flow with exactly 0 bytes left credits 0 bytes "
                                                       "to its links: x + 0.0 == x",
    "sim.network.fairshare.step.x_rate_unchanged__mutmut_21": "arg is set at a flow's first link (every flow has one) "
                                                        "before it is read",
    "sim.network.fairshare.filling.x_fill_links__mutmut_6": "pair counts held as floats: exact at these sizes",
    "sim.network.fairshare.filling.x_fill_links__mutmut_64": "frozen marks held as 0.0/1.0 instead of booleans",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_55": "None stored in a boolean array is False",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_69": "on a tie the later link is a flow's tightest: the same share, "
                                                  "and both links fill in the round it freezes (all their other "
                                                  "unfrozen flows are as tight), so either is its bottleneck",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_22": "a flow's tight share is set before it is read, for every flow "
                                                   "filled (the others are never read)",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_28": "np.full infers int64 from the fill value -1",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_31": "same as mutmut_28",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_32": "argmin is set for every flow filled before it is read",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_33": "same as mutmut_32",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_36": "frozen marks held as 0.0/1.0 instead of booleans",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_38": "same as mutmut_36",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_47": "np.full infers int64 from the fill value -1",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_50": "same as mutmut_47",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_51": "pos is set for every flow put in the heap before it is read; the "
                                                   "others' is never read",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_52": "same as mutmut_51",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_58": "a flow's first link gives a finite share, which replaces the "
                                                   "initial link",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_59": "same as mutmut_58",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_97": "round stamps held as floats: exact at these counts",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_99": "same as mutmut_97",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_101": "the round stamps start at 2 instead of 1: still a new value each "
                                                    "round, never the initial 0",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_105": "the round stamps go -1, -2, ...: still a new value each round, "
                                                    "never the initial 0",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_106": "the round stamps go 2, 4, ...: still a new value each round",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_110": "threshold minus 1e-300 instead of plus: differs only for a share "
                                                    "of 0, and shares are positive (capacities are)",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_122": "< instead of <= against the threshold: the round's own share is "
                                                    "below it, another share equals it only by chance",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_171": "scanning the pairs of every link up to l instead of l's: the "
                                                    "others are filtered out by argmin != l",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_180": "same as mutmut_58 (a flow's recomputed tightest link)",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_181": "same as mutmut_58",
    "sim.network.fairshare.filling.x_fill_flows__mutmut_191": "same as mutmut_69 (a tie when a flow's tightest link is "
                                                    "recomputed)",
    "sim.network.fairshare.filling.x_fill_links__mutmut_125": "the round stamps go 2, 4, ... instead of 1, 2, ...: still a new "
                                              "value each round",
    "sim.network.fairshare.step.x_rate_unchanged__mutmut_50": "ok = None instead of False: both falsy where read "
                                                        "(not ok, and solve's test of the result)",
    "sim.network.fairshare.step.x_rate_unchanged__mutmut_80": "bott_count[arg] = 1 instead of += 1: a new flow takes only "
                                                        "a link that froze nobody (bott_count 0), so both give 1",
    "sim.network.fairshare.step.x_rate_unchanged__mutmut_22": "arg starts at +1 instead of -1: it is read only when r is "
                                                        "finite, which a pair's spare set together with arg",
    "sim.network.fairshare.step.x_rate_unchanged__mutmut_23": "same as mutmut_22 (arg starts at -2)",
    "sim.network.fairshare.step.x_rate_unchanged__mutmut_30": "a link that froze a flow is full up to rounding (a "
                                                        "departure from it refills): an arrival crossing it gets at "
                                                        "most that rounding as its rate, and the flows on its tightest "
                                                        "link are faster, so the test fails either way",
    "sim.network.fairshare.step.x_rate_unchanged__mutmut_33": "r = -2.0 instead of -1.0: any negative r fails the test",
    "sim.network.fairshare.step.x_rate_unchanged__mutmut_44": "a spare of exactly 0 passing the first test: it is 0 only "
                                                        "on a full link, whose flows are faster than 0, so the second "
                                                        "fails (a link of no capacity would give a rate of 0, which "
                                                        "solve cannot time: the fabric routes no flow over one)",
    "sim.network.fairshare.step.x_rate_unchanged__mutmut_73": "fastest raised on an equal rate too: the same value",
    "sim.network.fairshare.step.x_solve__mutmut_33": "a larger scratch for the saved loads: only its first entries are used",
    "sim.network.fairshare.step.x_solve__mutmut_38": "raising the peaks of the earlier flows' links too: a peak is raised "
                                               "whenever a link's rate rises, and only new flows raised any here",
    "sim.network.fairshare.step.x_solve__mutmut_43": "a peak raised to an equal utilisation: the same value",
    "sim.network.fairshare.step.x_solve__mutmut_62": "the nearest completion replaced by an equal one: the same value",
    "sim.network.fairshare.refill.x_refill_all__mutmut_69": "fastest raised on an equal rate too: the same value",
    "sim.network.jitcache.x_drop_stale__mutmut_16": "a kernel file dated at the very nanosecond the clock is read: "
                                                    "no run can make that instant",
    "sim.network.fairshare.refill.x_refill_affected__mutmut_287": "fastest raised on an equal rate too: the same value",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_24": "np.full infers int64 from the fill value -1",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_27": "same as mutmut_24",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_48": "round stamps held as floats: exact at these counts",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_50": "same as mutmut_48",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_61": "every unfrozen flow looked at again each round, not only those whose tightest link changed: "
             "the others' links' shares only rose since their last look (a frozen flow's share is the "
             "lowest), so the same minimum on the same link, but where rounding lowers a share by an ulp",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_62": "same as mutmut_61",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_63": "every flow looked at again at round 0: the first pass's shares, computed again the same way",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_69": "a flow looked at again has links: its first link's finite share replaces the initial link",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_70": "same as mutmut_69",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_84": "<= instead of < when finding the lowest share: the same value",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_100": "every round sorted (in_order starts None): a stable sort of a round already in order keeps it",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_101": "same as mutmut_100 (in_order starts False)",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_108": "equal shares counted out of order: the stable sort keeps them in flow order",
    "sim.network.fairshare.scan.x_fill_scan__mutmut_111": "None instead of False: both falsy, the round is sorted",
    "sim.network.fairshare.scan.x_in_heap_order__mutmut_7": "numpy reads the sort kind case-insensitively: the same "
                                                       "stable sort",
    "sim.network.fairshare.refill.x_refill__mutmut_5": "kept > 1 instead of > 0: with one earlier flow the refill set, when a "
                                             "refill is needed, always takes it in (the only flow a link of the "
                                             "change froze, or a faster one on the new flow's bottleneck): both refill "
                                             "the same two flows",
    "sim.network.fairshare.refill.x_refill_affected__mutmut_25": "-2 instead of -1 when the set passes half: refill reads "
                                                                  "only the sign",
    "sim.network.fairshare.refill.x_refill_affected__mutmut_115": "same as mutmut_25 (another of its returns of -1)",
    "sim.network.fairshare.refill.x_refill_affected__mutmut_119": "same as mutmut_25 (another of its returns of -1)",
    "sim.network.fairshare.refill.x_refill_affected__mutmut_211": "same as mutmut_25 (another of its returns of -1)",
    "sim.network.fairshare.refill.x_refill_affected__mutmut_203": ">= instead of > against the member's rate x (1 + 1e-12): an "
                                                        "outside rate equals that bound only by chance",
    "sim.network.fairshare.filling.x_fill_links__mutmut_219": "a remaining below 0 is rounding on a link whose every "
                                                              "flow froze in that round (its share was the round's): "
                                                              "never read again",
    "sim.network.fairshare.filling.x_fill_links__mutmut_26": "np.full infers int64 from the fill value -1",
    "sim.network.fairshare.filling.x_fill_links__mutmut_66": "same as mutmut_64 (frozen marks held as 0.0/1.0)",
    "sim.network.fairshare.heap.x_heap_remove__mutmut_14": "the item moved to place 1 is never below the root (the "
                                                          "least of all in a heap in order): not moving it up there "
                                                          "changes nothing",
    "sim.network.fairshare.oracle.x_max_min_rates__mutmut_114": "the clipped links are those whose every flow froze "
                                                               "(their users set to 0, their share inf): never read",
    "sim.network.fairshare.oracle.x_max_min_rates__mutmut_27": "astype(None) is float64",
    "sim.network.fairshare.oracle.x_max_min_rates__mutmut_36": "weights given as ints: every use (bincount's weights, "
                                                              "products with floats) turns them to floats exactly",
    "sim.network.fairshare.records.x_new_scratch__mutmut_1": "room for 257 dirty links instead of 256: the loop grows "
                                                            "it when it needs more",
    "sim.network.fairshare.tallies.x_credit__mutmut_3": "crediting when dt == 0 too: adds 0 bytes and 0 s, sets since to now "
                                              "(already its value)",
    "sim.network.traffic.x__select_compiled__mutmut_17": "a GPU's seen-mark starting at -2 instead of -1: never a "
                                                         "token index either",
    "sim.network.traffic.x__select_compiled__mutmut_24": "np.full(N, -1) is int64 without the dtype too",
    "sim.network.traffic.x__select_numpy__mutmut_77": "hits as floats instead of booleans: the same sums and any()",
    # Python >= 3.10 ignores format_exception_only's first argument when the exception is given.
    "sim.sweep.x_run_point__mutmut_22": "format_exception_only(None, exc) == format_exception_only(type(exc), exc)",
    "sim.sweep.x_run_point__mutmut_24": "format_exception_only(exc) is the one-argument form of the same call",
    "sim.sweep.x_run_point__mutmut_26": "same as mutmut_22",
    "sim.sweep.x__finished_rows__mutmut_15": "a CSV of ours has status columns besides the points' and sim_code, "
                                             "so <= and < agree",
    "sim.sweep.x__finished_rows__mutmut_20": "pandas reads to_dict's orient in any case",
    "sim.sweep.x_rows_of__mutmut_27": "pandas reads to_dict's orient in any case",
    "sim.sweep.x_rows_of__mutmut_20": "the CSV the sweep just wrote has every column of its points: the default "
                                      "of r.get is never used",
    "sim.sweep.x_rows_of__mutmut_22": "same as mutmut_20",
    "sim.sweep.x_run_sweep__mutmut_69": "with no point to run, the serial loop runs nothing either way",
    "sim.sweep.x_rows_of__mutmut_23": "same as mutmut_20",
    "sim.network.api.x_checked_rate__mutmut_17": "1e18 and 1e+18 are one float",
    "sim.network.fabric.xǁFabricǁ_new_flow__mutmut_16": "a private link of the route's own least capacity binds no "
                                                       "flow harder than that link does: the same rates",
    "sim.training.comm.live.xǁLiveCommǁsend_all__mutmut_33": "`or` for `and` only sends pairs one by one that the "
                                                            "route set starts as the same flows, unbounded",
}
KILLED = {"killed", "timeout", "segfault", "caught by type check"}     # a mutant the suite notices
NOT_KILLED = {"survived", "no tests", "suspicious"}                     # ... and one it does not


def scores(roots=None) -> pd.DataFrame:
    """Per module (of every tree in ``roots``, default :func:`_roots`): mutants, checked, killed,
    survived (no test failed or none reached it), equivalent (listed above), score = killed /
    (checked - equivalent), and the survivors' names."""
    from mutmut.stats import status_by_exit_code
    roots = _roots() if roots is None else [roots] if isinstance(roots, (str, Path)) else roots
    rows = []
    for root, meta in ((root, meta) for root in map(Path, roots) for meta in root.glob("**/*.py.meta")):
        status = {m: status_by_exit_code[c] for m, c in json.loads(meta.read_text())["exit_code_by_key"].items()}
        module = str(meta.relative_to(root)).removesuffix(".py.meta").replace("/", ".")
        killed = sum(1 for s in status.values() if s in KILLED)
        survived = sorted(m for m, s in status.items() if s in NOT_KILLED and m not in EQUIVALENT)
        equivalent = sum(1 for m, s in status.items() if s in NOT_KILLED and m in EQUIVALENT)
        checked = killed + len(survived) + equivalent
        rows.append({"module": module, "mutants": len(status), "checked": checked, "killed": killed,
                     "survived": len(survived), "equivalent": equivalent,
                     "score": round(killed / (checked - equivalent), 4) if checked > equivalent else float("nan"),
                     "survivors": " ".join(survived)})
    columns = ["module", "mutants", "checked", "killed", "survived", "equivalent", "score", "survivors"]
    return pd.DataFrame(rows, columns=columns).sort_values("module", kind="stable").reset_index(drop=True)


def kernel_tree(tree: Path = KERNEL_TREE) -> Path:
    """``tree``: a copy of the sources, tests and presets whose mutmut configuration
    (:data:`KERNEL_CONFIG`) mutates only the compiled kernels. mutmut wraps every function it
    mutates, and numba cannot compile the wrappers, so these run with compilation off: the same code
    as Python (their tests and the fabric's take about 50 s so). Files are only rewritten when they
    changed, so mutmut keeps its results for the rest."""
    import re
    for src in _tree_files():
        _write_if_changed(tree / src, src.read_bytes())
    drop_removed(tree)                                  # the tree's copies of files removed here
    project = Path("pyproject.toml").read_text()
    project = re.sub(r"\[tool\.mutmut\].*?(?=^\[)", lambda _m: KERNEL_CONFIG + "\n", project, flags=re.S | re.M)
    _write_if_changed(tree / "pyproject.toml", project.encode())
    return tree


def _tree_files():
    """The files mutmut's trees copy: sources, tests, presets, scripts, tools and the documents the
    tests read (no bytecode)."""
    for top in ("sim", "topologies", "experiments", "tools", "validation", "examples", "docs", "tests"):
        for src in sorted(Path(top).rglob("*")):
            if src.is_file() and "__pycache__" not in src.parts:
                yield src
    if Path("README.md").is_file():
        yield Path("README.md")


def _write_if_changed(path: Path, data: bytes) -> bool:
    """Write ``data`` to ``path`` unless it already holds it; whether it wrote."""
    if path.is_file() and path.read_bytes() == data:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return True


def add_arguments(parser) -> None:
    parser.add_argument("modules", nargs="*", help=f"dotted modules to mutate (default: {', '.join(CORE)})")
    parser.add_argument("--report", action="store_true", help="only write results/mutation.csv from mutants/")
    parser.add_argument("--recheck-timeouts", action="store_true",
                        help="run every mutant mutmut timed out again, alone, then write the table")
    parser.add_argument("--recheck-survivors", action="store_true",
                        help="run every surviving mutant of the modules (or functions, or mutants) named "
                             "(default all) again, alone, in a fresh interpreter, then write the table")
    parser.add_argument("--tests", nargs="+", default=(), metavar="FILE",
                        help="with a recheck: also run these test files on every mutant (tests written since "
                             "mutmut built its map of tests by function); with --sample: run the sample alone "
                             "against these files only, instead of mutmut's map")
    parser.add_argument("--children", type=arg(integer=True, low=1, high=256), default=2,
                        help="parallel mutmut workers (default 2)")
    parser.add_argument("--sample", type=arg(integer=True, low=1), default=None, metavar="N",
                        help="run only a seeded random sample of N mutants per module (for the modules whose "
                             "every mutant needs minutes of tests); the table's checked column says how many")
    parser.add_argument("--seed", type=arg(integer=True, low=0), default=0, help="seed of --sample (default 0)")
    parser.add_argument("--out", default="results", help="folder for mutation.csv (default results)")
    parser.add_argument("--kernels", action="store_true",
                        help=f"the compiled kernels ({', '.join(KERNELS)}) instead, in {KERNEL_TREE}/ with numba off")


def sync_data_files(root: Path = Path("mutants")) -> list[str]:
    """Copy into mutmut's tree the data files (presets, profiles: everything but Python) that have
    changed since it was made: mutmut refreshes the Python sources it copies, not the rest, and a
    stale preset makes its clean run fail. Returns the files copied."""
    if not root.is_dir():
        return []
    return [str(src) for src in _tree_files() if src.suffix not in (".py", ".pyc", ".meta", ".spans")
            and _write_if_changed(root / src, src.read_bytes())]


def drop_removed(root: Path = Path("mutants")) -> list[str]:
    """Remove from a mutmut tree (``root``) the copies of files this checkout no longer has (a
    module or test removed or renamed), with their mutants' ``.meta`` and ``.spans``: mutmut copies
    files but never removes one, and a stale copy runs in its clean test run (a removed module's
    test fails there) or reports the old module's score. Returns the files removed."""
    removed = []
    for top in ("sim", "topologies", "experiments", "tools", "validation", "examples", "docs", "tests"):
        for copy in sorted((root / top).rglob("*")) if (root / top).is_dir() else []:
            if not copy.is_file() or "__pycache__" in copy.parts:
                continue
            source = copy.relative_to(root)
            if source.suffix in (".meta", ".spans"):
                source = source.with_suffix("")
            if not source.exists():
                copy.unlink()
                removed.append(str(copy.relative_to(root)))
    return removed


def stale_test_map(modules, root: Path = Path("mutants"), tests: Path = Path("tests")) -> bool:
    """Whether mutmut's map of which tests reach each function (``mutmut-stats.json``) is older than
    a source of ``modules`` (dotted) and either lacks one of its mutated functions or is older than a
    test module too: mutmut adds to the map only the tests it has not seen, so a function renamed
    since is run against no test, and a function a changed test now reaches is run without that
    test (their mutants survive falsely) until the map is built anew. A function no test reaches is
    absent from a fresh map too; the age checks keep that from rebuilding it every run."""
    stats = root / "mutmut-stats.json"
    if not stats.is_file():
        return False
    known = json.loads(stats.read_text())["tests_by_mangled_function_name"]
    built = stats.stat().st_mtime_ns
    for meta in sorted(root.glob("**/*.py.meta")):
        module = str(meta.relative_to(root)).removesuffix(".py.meta").replace("/", ".")
        if modules and not any(module == m or module.startswith(m + ".") for m in modules):
            continue
        source = Path(module.replace(".", "/") + ".py")
        if not source.is_file() or source.stat().st_mtime_ns <= built:
            continue
        functions = {name.rsplit("__mutmut_", 1)[0] for name in json.loads(meta.read_text())["exit_code_by_key"]}
        if functions - set(known) or any(t.stat().st_mtime_ns > built for t in tests.glob("test_*.py")):
            return True
    return False


def recheck(root: Path = Path("mutants"), limit_s: float = 240.0, status: str = "timeout",
            modules=(), extra_tests=()) -> dict[str, int]:
    """Run again, one at a time, every mutant mutmut recorded as ``status`` (of ``modules``: dotted
    modules, mangled functions or mutant names; default all; ``survived``: every status the table
    counts as surviving, :data:`NOT_KILLED`), against the tests that reach its
    function (as mutmut's stats list them) and the test files ``extra_tests`` (written since mutmut
    built that map: copied into ``root``'s tests first), with ``limit_s`` seconds; record the
    result (pytest's exit code: 1 killed, 0 survived) in mutmut's meta file. On a busy machine
    mutmut's timeouts, which count as killed, can be a slow run of a surviving mutant; and a few of
    its survivors are killed when run alone. Equivalent mutants (:data:`EQUIVALENT`) are not run."""
    from mutmut.stats import status_by_exit_code
    extra = _copy_tests(root, extra_tests)
    stats = json.loads((root / "mutmut-stats.json").read_text())["tests_by_mangled_function_name"]
    selection = _selection_args()                   # pyproject read once, not per test of every mutant
    ignored = {a.removeprefix("--ignore=") for a in selection if a.startswith("--ignore=")}
    done = {}
    for meta_path in sorted(root.glob("**/*.py.meta")):
        meta = json.loads(meta_path.read_text())
        for name, code in meta["exit_code_by_key"].items():
            wanted = NOT_KILLED if status == "survived" else {status}     # a survivor as the table counts one
            if code is None or status_by_exit_code[code] not in wanted or name in EQUIVALENT:
                continue
            if modules and not any(name == m or name.startswith((m + ".", m + "__mutmut_")) for m in modules):
                continue                                    # a module, a function or one mutant
            tests = sorted(t for t in stats.get(name.rsplit("__mutmut_", 1)[0], []) if t.split("::")[0] not in ignored)
            tests = [t for t in tests if t.split("::")[0] not in extra] + extra
            code = _run_one(root, name, tests, selection, limit_s)
            if code is None:
                continue                                    # a real timeout: it stays one
            meta["exit_code_by_key"][name] = code
            meta_path.write_text(json.dumps(meta, indent=4))
            done[name] = code
            print(f"{name}: {'killed' if code else 'survived'}")
    return done


def run_alone(names: list[str], test_files, root: Path = Path("mutants"), limit_s: float = 240.0) -> dict[str, int]:
    """Run each unchecked mutant of ``names`` alone, in a fresh interpreter, against only
    ``test_files`` (copied into ``root``'s tests), and record its result as :func:`recheck` does
    (a timeout stays unchecked). For modules whose tests reach Dask sweeps that a mutant can hang:
    the named files replace mutmut's map of tests, so the score is of those tests alone."""
    tests = _copy_tests(root, test_files)
    selection = _selection_args()
    wanted = set(names) - set(EQUIVALENT)
    done = {}
    for meta_path in sorted(root.glob("**/*.py.meta")):
        meta = json.loads(meta_path.read_text())
        mine = [n for n, code in meta["exit_code_by_key"].items() if n in wanted and code is None]
        for name in mine:
            code = _run_one(root, name, tests, selection, limit_s)
            if code is None:
                print(f"{name}: timed out after {limit_s:g} s (left unchecked)")
                continue
            meta["exit_code_by_key"][name] = code
            meta_path.write_text(json.dumps(meta, indent=4))
            done[name] = code
            print(f"{name}: {'killed' if code else 'survived'}")
    return done


def _copy_tests(root: Path, files) -> list[str]:
    """Copy the test ``files`` into ``root``'s tests; their paths there (``tests/NAME``)."""
    import shutil
    out = []
    for path in map(Path, files):
        if not path.is_file():
            raise InputError(f"--tests: {path} is not a file")
        shutil.copy2(path, root / "tests" / path.name)
        out.append(f"tests/{path.name}")
    return out


def _run_one(root: Path, name: str, tests: list[str], selection: list[str], limit_s: float) -> int | None:
    """pytest's exit code for mutant ``name`` on ``tests`` (stopping at the first failure), run in
    ``root`` with mutmut's switch set; ``None`` when it ran past ``limit_s``."""
    import os
    skip = [a for a in selection if a.startswith("--deselect")]
    try:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *skip, *tests],
                              cwd=root, env={**os.environ, "MUTANT_UNDER_TEST": name}, capture_output=True,
                              timeout=limit_s).returncode
    except subprocess.TimeoutExpired:
        return None


def sample(modules, n: int, seed: int, root: Path = Path("mutants")) -> list[str]:
    """The names of a seeded random sample of ``n`` mutants of each module (all of them when it has
    fewer), leaving out those already checked: the same modules, ``n`` and seed give the same sample,
    so an interrupted sampled run resumes. A module mutmut has not listed yet (no meta file) is
    refused: run it whole once, or ``mutmut run`` it, first."""
    if n < 1:
        raise InputError(f"--sample must be >= 1, got {n}")
    names = []
    for module in modules:
        path = root / module.replace(".", "/")
        metas = [path.with_suffix(".py.meta")] if path.with_suffix(".py.meta").is_file() else \
            sorted(path.glob("**/*.py.meta"))         # a package: each of its modules
        if not metas:
            raise InputError(f"--sample: no mutants listed for {module} (no {path}.py.meta); "
                             f"run `python -m mutmut run '{module}*'` first")
        names += [name for meta in metas for name in _sample_of(meta, n, seed)]
    return names


def stale_modules(modules, root: Path = Path("mutants")) -> list[str]:
    """The modules (of ``modules``) with a source file changed since mutmut last mutated it (its
    copy under ``root`` is older) or never mutated yet (no copy: a new module, or a fresh checkout):
    their listed mutants are yesterday's or missing, and a sample drawn from them would find nothing
    to run and report the old score, or stop for want of a list."""
    stale = []
    for module in modules:
        path = Path(module.replace(".", "/"))
        files = [path.with_suffix(".py")] if path.with_suffix(".py").is_file() else sorted(path.glob("**/*.py"))
        if any(not (root / f).is_file() or f.stat().st_mtime > (root / f).stat().st_mtime for f in files):
            stale.append(module)
    return stale


def refresh_mutants() -> None:
    """Have mutmut copy and mutate the changed sources now (about 15 s): it does that first in every
    ``mutmut run``, then stops here at a name that matches no mutant (its complaint is expected and
    not shown); it resets the results of the functions that changed."""
    subprocess.call([sys.executable, "-m", "mutmut", "run", "refresh-only.no-such-mutant"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _sample_of(meta: Path, n: int, seed: int) -> list[str]:
    """The unchecked mutants among a seeded sample of ``n`` of one module's (``meta``: mutmut's file)."""
    import random
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    chosen = sorted(codes) if len(codes) <= n else random.Random(seed).sample(sorted(codes), n)
    return sorted(m for m in chosen if codes[m] is None)


def _selection_args() -> list[str]:
    import tomllib
    config = tomllib.loads(Path("pyproject.toml").read_text())["tool"]["mutmut"]
    return config.get("pytest_add_cli_args_test_selection", [])


def check_modules(modules) -> None:
    """Refuse, before mutmut starts (its runs take minutes to hours), a module that is not a file
    or package of this tree: mutmut would mutate nothing and report the old score."""
    for module in modules:
        path = Path(module.replace(".", "/"))
        if not (path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()):
            raise InputError(f"unknown module {module!r}: no {path}.py or package {path}/ here "
                             f"(e.g. {', '.join(CORE[:3])})")


def run(args) -> int:
    if not (args.report or args.recheck_timeouts or args.recheck_survivors):
        check_modules(args.modules or ())               # --recheck-survivors also takes functions and mutants
        if args.tests and args.sample is None:
            raise InputError("--tests: give it with --sample N (the sample against those files) or with a recheck")
    if args.kernels:
        import os
        forwarded = [*(args.modules or KERNELS), "--children", str(args.children), "--seed", str(args.seed),
                     "--out", str(Path(args.out).resolve())]
        forwarded += ["--sample", str(args.sample)] if args.sample is not None else []
        forwarded += [flag for flag, on in (("--report", args.report), ("--recheck-timeouts", args.recheck_timeouts),
                                            ("--recheck-survivors", args.recheck_survivors)) if on]
        tree = kernel_tree().resolve()
        status = subprocess.call([sys.executable, "-m", "tools.mutation", *forwarded], cwd=tree,
                                 env={**os.environ, "NUMBA_DISABLE_JIT": "1"})
        if status:
            print(f"the kernels' run exited with {status}", file=sys.stderr)
        args.kernels, args.report = False, True         # then only the table of every tree, from here
        args.recheck_timeouts = args.recheck_survivors = False
        return run(args)
    if args.recheck_timeouts or args.recheck_survivors:
        if args.recheck_timeouts:
            recheck(extra_tests=args.tests)
        if args.recheck_survivors:
            recheck(status="survived", modules=args.modules, extra_tests=args.tests)
    elif not args.report:
        for name in drop_removed():
            print(f"removed mutants/{name} (no longer in this checkout)")
        for name in sync_data_files():
            print(f"refreshed mutants/{name}")
        modules = args.modules or CORE
        if stale_test_map(modules):
            print("mutmut's map of tests by function predates a renamed function: building it anew")
            Path("mutants/mutmut-stats.json").unlink()
        stale = stale_modules(modules) if args.sample is not None else []
        if stale:
            print(f"refreshing the mutants of {', '.join(stale)} (changed since mutmut's last run)")
            refresh_mutants()
        patterns = sample(modules, args.sample, args.seed) if args.sample is not None else [f"{m}*" for m in modules]
        if not patterns:
            print("every sampled mutant is already checked", file=sys.stderr)
        if args.tests and patterns:                     # the sample against the named test files only
            run_alone(patterns, args.tests)
        else:
            status = subprocess.call([sys.executable, "-m", "mutmut", "run", "--max-children", str(args.children),
                                      *patterns]) if patterns else 0
            if status:
                print(f"mutmut exited with {status}; writing what it finished", file=sys.stderr)
    df = scores()
    if df.empty:
        print("no mutmut results under mutants/: run without --report first", file=sys.stderr)
        return 1
    write_csv_atomic(df, Path(args.out) / "mutation.csv")
    print(df.drop(columns="survivors").to_string(index=False))
    return 0


def _roots() -> tuple[Path, ...]:
    """Where mutmut's results are: here, and the kernels' tree (when this is not it)."""
    here = Path("mutants")
    return (here,) if Path.cwd().name == KERNEL_TREE.name else (here, KERNEL_TREE / "mutants")


def main(argv=None) -> int:
    return script_main(__doc__, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
