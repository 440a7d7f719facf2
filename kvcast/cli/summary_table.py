"""The comparison table printed by ``simulate``, ``evaluate`` and ``quickstart``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text


def _ms(x: float | None) -> str:
    if x is None or x != x:
        return "-"
    return f"{x / 1e3:.2f}s" if x >= 1e4 else f"{x:.0f}"


def _share(x: float | None, fmt: str) -> str:
    return "-" if x is None or x != x else format(x, fmt)


def capacity_cell(s: dict[str, Any]) -> str:
    """``capacity_time_scale`` as shown: ``>=256`` where the search stopped at its upper edge
    (the SLO still met: a lower bound), ``<0.0156`` where the SLO was met at no load probed."""
    x = s.get("capacity_time_scale")
    if x is None or x != x:
        return "-"
    bound, edge = s.get("capacity_bound"), s.get("capacity_bound_time_scale")
    if bound == "upper":
        return f">={x:.3g}"
    if bound == "lower":
        return f"<{edge if edge is not None else x:.3g}"
    return f"{x:.3g}"  # 1/64: 0.0156


def summary_table(summaries: Sequence[dict[str, Any]], title: str) -> Table:
    cap = any("capacity_time_scale" in s for s in summaries)
    slo = any("slo_label" in s for s in summaries)
    quota = any("speculative_quota_gib" in s for s in summaries)
    t = Table(title=Text(title), title_justify="left")  # a trace name is not markup
    cols = [
        "policy",
        *(["SLO"] if slo else []),
        *(["quota GiB"] if quota else []),
        "load x",
        "TTFT p50",
        "p99",
        "SLO ok",
        "goodput rps",
        "prefix hit",
        "pulled GB",
        "repl GB (used)",
    ]
    if cap:
        cols.append("capacity x")
    for c in cols:
        t.add_column(c, justify="left" if c == "policy" else "right")
    for s in summaries:
        q = s.get("speculative_quota_gib")
        row = [
            s["policy"],
            *([s.get("slo_label", "")] if slo else []),
            *([f"{q:g}" if q is not None else "-"] if quota else []),
            f"{s['time_scale']:g}",
            _ms(s["ttft_ms"]["p50"]),
            _ms(s["ttft_ms"]["p99"]),
            _share(s["slo_attainment"], ".1%"),
            _share(s["goodput_rps"], ".2f"),  # a trace spanning no time: no rate
            _share(s["prefix_hit_ratio"], ".1%"),  # none served: no ratio
            f"{s['bytes_pulled'] / 1e9:.0f}",
            f"{s['bytes_replicated'] / 1e9:.0f} ({s['bytes_replicated_used'] / 1e9:.0f})",
        ]
        if cap:
            row.append(capacity_cell(s))
        t.add_row(*row)
    return t


def rejection_notes(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """One line per run that rejected requests: they count against its SLO attainment and
    have no TTFT, which the table alone does not say."""
    out = []
    for s in summaries:
        rejected = int(s.get("rejected") or 0)
        if rejected:
            out.append(
                f"{s['policy']} x{s['time_scale']:g}: {rejected} of {s['requests']} requests "
                "rejected (the router placed them nowhere, or prompt and output need more KV "
                "blocks than a node holds): they count as missing the SLO"
            )
    return out
