"""The per-kernel breakdown a run shows: every kernel of one layer of each kind (dense, MoE), and of
the embedding and the head, for one micro-batch on one GPU, with its time, FLOPs, bytes and what
bounds it (:mod:`sim.compute`). ``run`` prints a summary of it, ``--json`` and ``--out``
(``<name>_kernels.csv``) hold every row, and the results page shows the largest.
"""
from __future__ import annotations

import html

import pandas as pd

from ...compute import OpCost, embedding_ops, head_ops
from .chunk import ChunkModel

COLUMNS = ("layer", "block", "phase", "kernel", "kind", "shape", "us", "gflop", "mbytes", "bound", "launches")
PHASES = {"f": "forward", "i": "backward (inputs)", "w": "backward (weights)"}


def _rows(layer: str, costs: list[OpCost]) -> list[dict]:
    return [{"layer": layer, "block": c.op.block, "phase": c.op.phase, "kernel": c.op.name, "kind": c.op.kind,
             "shape": "x".join(f"{v:g}" for v in c.op.shape), "us": c.seconds * 1e6, "gflop": c.op.flops / 1e9,
             "mbytes": c.op.bytes / 1e6, "bound": c.bound, "launches": c.op.kernels} for c in costs]


def kernel_frame(chunk: ChunkModel) -> pd.DataFrame:
    """One row per kernel (see the module); empty in the FLOPs model."""
    if chunk.kernels is None:
        return pd.DataFrame(columns=COLUMNS)
    m, run = chunk.model, chunk.run
    rows: list[dict] = []
    kinds = ([False] if m.dense_layers or not m.is_moe else []) + ([True] if m.is_moe else [])
    for moe in kinds:
        rows += _rows("moe" if moe else "dense", chunk.kernel_costs(moe))
    rows += _rows("embedding", chunk.kernels.costs(embedding_ops(chunk.tokens, m.hidden, run.fusion)))
    norm_tokens = chunk.tokens / run.tp if run.sequence_parallel else chunk.tokens
    rows += _rows("head", chunk.kernels.costs(head_ops(chunk.tokens, norm_tokens, m.hidden, m.vocab, run.tp,
                                                        run.fusion, run.loss_kernel, run.wgrad_out_bytes,
                                                        run.wgrad_add_bytes)))
    return pd.DataFrame(rows, columns=COLUMNS)


def summary_lines(frame: pd.DataFrame, top: int = 4) -> list[str]:
    """Per layer kind: milliseconds of the forward and the two backward parts, the share of GEMMs,
    attention and memory-bound kernels, the launches, and the ``top`` slowest kernels."""
    lines = []
    for layer, g in frame[frame["layer"].isin(["dense", "moe"])].groupby("layer", sort=False):
        ms = {p: g.loc[g["phase"] == p, "us"].sum() / 1e3 for p in "fiw"}
        total = sum(ms.values())
        share = {k: 100 * g.loc[g["kind"] == k, "us"].sum() / 1e3 / total for k in ("gemm", "attention", "memory")}
        slow = g.nlargest(top, "us")
        lines.append(f"kernels of one {layer} layer, one micro-batch on one GPU: forward {ms['f']:.3g} ms, backward "
                     f"{ms['i']:.3g} + {ms['w']:.3g} ms (inputs + weights) in {int(g['launches'].sum())} launches; "
                     f"GEMMs {share['gemm']:.0f}%, attention {share['attention']:.0f}%, memory-bound "
                     f"{share['memory']:.0f}%; slowest: " + ", ".join(f"{r.kernel} {r.us / 1e3:.3g} ms ({r.bound})"
                                                                      for r in slow.itertuples()))
    return lines


def kernel_tables_html(frame: pd.DataFrame, top: int = 12) -> str:
    """The results page's section: per layer kind, its ``top`` slowest kernels, the rest in a fold."""
    if frame.empty:
        return ""
    out = ["<h2>Kernels</h2><p>Every kernel of one layer of each kind, one micro-batch on one GPU "
           "(<code>_kernels.csv</code> has them all): its time, FLOPs, HBM bytes of memory-bound kernels, and "
           "what bounds it.</p>"]
    for layer, g in frame.groupby("layer", sort=False):
        g = g.sort_values("us", ascending=False, kind="stable")
        out.append(f"<h3>{html.escape(layer)} ({g['us'].sum() / 1e3:.3g} ms)</h3>{_table(g.head(top))}")
        if len(g) > top:
            out.append(f"<details><summary>{len(g) - top} more kernels</summary>{_table(g.iloc[top:])}</details>")
    return "".join(out)


def _table(g: pd.DataFrame) -> str:
    head = ("<tr><th>Kernel</th><th>Part</th><th>Kind</th><th>Shape</th><th>Time (us)</th><th>GFLOP</th>"
            "<th>MB</th><th>Bound</th></tr>")
    rows = "".join(f"<tr><td>{html.escape(r.kernel)}</td><td>{html.escape(r.block)} {PHASES[r.phase]}</td>"
                   f"<td>{r.kind}</td><td>{html.escape(r.shape)}</td><td>{r.us:,.1f}</td><td>{r.gflop:,.2f}</td>"
                   f"<td>{r.mbytes:,.1f}</td><td>{r.bound}</td></tr>" for r in g.itertuples())
    return f"<table>{head}{rows}</table>"


__all__ = ["COLUMNS", "kernel_frame", "kernel_tables_html", "summary_lines"]
