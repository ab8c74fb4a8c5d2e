"""Markdown table + PNG chart from per-run metrics; comparisons are per-run dtq/peer ratios."""

from __future__ import annotations

import json
import os
import platform
import statistics
from dataclasses import asdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from systems.base import System

Runs = list[dict[str, Any]]

# (metric key, column header, better direction) — 'hi' higher is better, 'lo' lower is better
COLUMNS: list[tuple[str, str, str]] = [
    ("enqueue", "enqueue/s", "hi"),
    ("drain_1p", "drain/s 1 proc", "hi"),
    ("drain_np", "drain/s N proc", "hi"),
    ("io_1p", "1ms-io drain/s 1 proc", "hi"),
    ("io_np", "1ms-io drain/s N proc", "hi"),
    ("lat100_p50", "p50 ms @100/s", "lo"),
    ("lat100_p99", "p99 ms @100/s", "lo"),
    ("lat1000_p50", "p50 ms @1000/s", "lo"),
    ("lat1000_p99", "p99 ms @1000/s", "lo"),
    ("cmds_total", "cmds/task", "lo"),
    ("cpu_total", "Redis CPU µs/task", "lo"),
    ("rtt_total", "round trips/task", "lo"),
    ("rss_1p", "RSS MiB 1 proc", "lo"),
    ("pss_1p", "PSS MiB 1 proc", "lo"),
    ("pss_np", "PSS MiB N proc", "lo"),
]
NETWORK_PANELS: list[tuple[str, str, str]] = [
    ("enqueue", "enqueue/s", "hi"),
    ("drain_1p", "drain/s 1 proc", "hi"),
    ("lat100_p50", "p50 ms @100/s", "lo"),
    ("lat100_p99", "p99 ms @100/s", "lo"),
]
DETAIL: list[tuple[str, str]] = [
    ("cmds_enqueue", "cmds/task enqueue"), ("rtt_enqueue", "round trips/task enqueue"),
    ("cmds_worker", "cmds/task worker"), ("rtt_worker", "round trips/task worker"),
    ("cpu_enqueue", "Redis CPU µs/task enqueue"), ("cpu_worker", "Redis CPU µs/task worker"),
    ("rss_np", "RSS MiB N proc"), ("duplicates", "duplicate executions"),
    ("load1", "1-min load avg at end"),
]


def median_of(runs: Runs, key: str) -> float | None:
    """Median over runs of one metric (runs without it are ignored)."""
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def ratio_of(dtq: Runs, peer: Runs, key: str) -> float | None:
    """Median over runs of dtq/peer, pairing run i of dtq with run i of the peer."""
    vals = [a[key] / b[key] for a, b in zip(dtq, peer, strict=False)
            if a.get(key) is not None and b.get(key)]
    return statistics.median(vals) if vals else None


def fmt(v: float | None) -> str:
    """Compact number formatting; '—' for missing."""
    if v is None:
        return "—"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}" if abs(v) >= 0.1 or v == 0 else f"{v:.2g}"


def _h(header: str, cores: int) -> str:
    """Column header with the 'one process per core' count filled in."""
    return header.replace("N proc", f"{cores} proc")


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Markdown table lines."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def write(out_dir: str, meta: dict[str, Any], systems: list[System], skipped: dict[str, str],
          results: dict[str, Runs], notes: dict[str, list[str]]) -> tuple[str, str]:
    """Write <date>.md, <date>.png and <date>.json (raw runs) into out_dir; return md, png."""
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, meta["date"] + (f"-{meta['tag']}" if meta.get("tag") else ""))
    md_path, png_path = base + ".md", base + ".png"
    names = [s.name for s in systems if s.name in results]
    plan = meta["plan"]
    lines = [f"# dtq benchmark — {meta['date']}{' (smoke)' if meta['smoke'] else ''}", ""]
    lines += [f"Median of {meta['runs']} run(s) per figure; {os.cpu_count()} cores, "
              f"{platform.platform()}, Python {meta['python']}, private redis-server "
              f"{meta['redis']} on 127.0.0.1 (no persistence). Whole run took "
              f"{meta['seconds']:.0f} s.", ""]
    loads = [r["load1"] for runs in results.values() for r in runs if r.get("load1") is not None]
    if loads and max(loads) > plan.cores * 0.75:
        lines += [f"**Warning:** the machine was busy with other work (1-min load average up "
                  f"to {max(loads):.1f} on {plan.cores} cores); absolute figures are noisy, "
                  f"the per-run dtq/peer ratios less so.", ""]
    lines += ["## Results", ""]
    rows = [[n] + [fmt(median_of(results[n], k)) for k, _, _ in COLUMNS] for n in names]
    lines += [*_table(["system"] + [_h(h, plan.cores) for _, h, _ in COLUMNS], rows), ""]
    if "dtq" in results:
        lines += ["## dtq / peer (median of per-run ratios)", "",
                  "Throughput columns: >1 means dtq is faster. Latency, commands and memory "
                  "columns: <1 means dtq uses less.", ""]
        rows = [[n] + [fmt(ratio_of(results["dtq"], results[n], k)) for k, _, _ in COLUMNS]
                for n in names if n != "dtq"]
        lines += [*_table(["peer"] + [_h(h, plan.cores) for _, h, _ in COLUMNS], rows), ""]
    else:
        reason = skipped.get("dtq", "not selected")
        lines += [f"**dtq was not measured** ({reason}); no dtq/peer ratios in this file.", ""]
    lines += ["## Details", ""]
    rows = [[n] + [fmt(median_of(results[n], k)) for k, _ in DETAIL] for n in names]
    lines += [*_table(["system"] + [_h(h, plan.cores) for _, h in DETAIL], rows), ""]
    lines += _bulk_section(systems, results)
    lines += _scaling_section(names, results, plan.scaling)
    if meta.get("network"):
        lines += _network_section(names, results, meta["network"])
    lines += ["## Systems, configurations, delivery guarantee", ""]
    rows = [[s.name, s.package + " " + s.version(), s.config, s.at_least_once]
            for s in systems]
    rows += [[n, "—", "skipped", r] for n, r in skipped.items()]
    lines += [*_table(["system", "version", "configuration", "at-least-once?"], rows), ""]
    lines += ["## Method", "",
              f"- Workload: handler records `time.time()` at its start and appends "
              f"`seq enqueued started finished` to a per-process file (one `write()`, no Redis "
              f"traffic). *no-op* returns at once; *1ms-io* sleeps 1 ms (`time.sleep` in sync "
              f"handlers, `asyncio.sleep` in async ones). C = {meta['concurrency']} threads/async "
              f"slots per process where the system has such a knob.",
              f"- enqueue/s: {plan.n} single enqueue calls from one producer process, no worker "
              f"running.",
              f"- drain/s: {plan.n} no-op ({plan.n_io} 1ms-io) tasks pre-queued, then the worker "
              f"starts; rate = tasks started after every busy process has begun / time to the "
              f"last finish (excludes start-up).",
              "- latency: enqueue → handler start, producer paced at "
              + ", ".join(f"{r}/s for {s:g} s" for r, s in plan.rates)
              + f" against {plan.cores} worker processes already warm; '—' = not all handled "
              f"in time.",
              "- cmds/task: Δ `INFO commandstats` calls (commands run inside Lua scripts "
              "included) over enqueue + 1-process drain, divided by tasks. round trips/task: "
              "Δ `total_reads_processed` (one per request, pipeline or EVALSHA), same window; "
              "the harness's own INFO calls are excluded. Worker start-up and idle polling "
              "during the window count.",
              "- Redis CPU µs/task: Δ (`used_cpu_user` + `used_cpu_sys` of `INFO cpu`) of the "
              "private server over the same window (enqueue + 1-process drain), divided by "
              "tasks. Redis runs commands on one core, so 1e6 / this is the most tasks per "
              "second one Redis core can serve for the whole fleet. The kernel accounts CPU "
              "in ticks: small runs are coarse.",
              "- memory: RSS and PSS (psutil) summed over the worker process tree after the "
              "drain (a supervisor process, where the system has one, is included).",
              f"- bulk enqueue: {plan.n} tasks through the system's public bulk call, "
              f"{plan.bulk} per call, from one producer process; then drained by one worker "
              "process.",
              "- scaling: a drain of pre-queued no-op tasks with each number of worker "
              "processes; Redis % of one core = drain rate * Redis CPU per task over that "
              "drain.", ""]
    lines += [f"- {s.name}: task counts scaled by {s.scale:g} ({int(plan.n * s.scale)} no-op / "
              f"{int(plan.n_io * s.scale)} 1ms-io tasks per drain) to stay within the time "
              f"budget." for s in systems if s.scale != 1.0]
    if any(s.scale != 1.0 for s in systems):
        lines.append("")
    all_notes = [f"- {k}: {n}" for k, ns in notes.items() for n in ns]
    if all_notes:
        lines += ["## Notes", "", *all_notes, ""]
    with open(md_path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))
    with open(base + ".json", "w", encoding="utf-8") as fh:  # raw per-run figures
        json.dump({"meta": {**meta, "plan": asdict(plan)}, "skipped": skipped,
                   "results": results, "notes": notes}, fh, indent=1)
    chart(png_path, names, results, meta)
    return md_path, png_path


def _bulk_section(systems: list[System], results: dict[str, Runs]) -> list[str]:
    """One-at-a-time vs bulk enqueue for the systems that have a public bulk call."""
    rows = []
    for s in systems:
        runs = results.get(s.name, [])
        if not s.bulk_api or median_of(runs, "enqueue_bulk") is None:
            continue
        ratio = [r["enqueue_bulk"] / r["enqueue"] for r in runs
                 if r.get("enqueue_bulk") and r.get("enqueue")]
        rows.append([s.name, s.bulk_api, fmt(median_of(runs, "enqueue")),
                     fmt(median_of(runs, "enqueue_bulk")),
                     fmt(statistics.median(ratio)) if ratio else "—",
                     fmt(median_of(runs, "cpu_enqueue")), fmt(median_of(runs, "cpu_enqueue_bulk")),
                     fmt(median_of(runs, "drain_bulk"))])
    if not rows:
        return []
    headers = ["system", "bulk call", "enqueue/s one per call", "enqueue/s bulk", "bulk / one",
               "Redis CPU µs/task one", "Redis CPU µs/task bulk", "drain/s of the bulk tasks"]
    return ["## Bulk enqueue", "", *_table(headers, rows), ""]


def _scaling_section(names: list[str], results: dict[str, Runs],
                     scaling: tuple[int, ...]) -> list[str]:
    """Drain rate and Redis CPU use by worker process count, and the fleet ceiling."""
    if not scaling:
        return []
    headers = ["system"]
    for p in scaling:
        headers += [f"drain/s {p} proc", f"Redis % core {p} proc"]
    headers += ["Redis CPU µs/task", "fleet ceiling tasks/s per Redis core"]
    rows = []
    for n in names:
        row = [n]
        for p in scaling:
            row += [fmt(median_of(results[n], f"scale{p}")),
                    fmt(median_of(results[n], f"scale{p}_redis_pct"))]
        cpu = median_of(results[n], "cpu_total")
        row += [fmt(cpu), fmt(1e6 / cpu) if cpu else "—"]
        rows.append(row)
    return ["## Scaling with worker processes", "",
            "Fleet ceiling = 1e6 / Redis CPU µs per task (full lifecycle, from the results "
            "table): the most one Redis core serves, however many workers there are.", "",
            *_table(headers, rows), ""]


def _network_section(names: list[str], results: dict[str, Runs],
                     net: dict[str, Any]) -> list[str]:
    """Loopback vs the delay relay: drain, enqueue and latency, and dtq/peer drain ratios."""
    nres: dict[str, Runs] = net["results"]
    rtt = net["rtt_relay_ms"]
    headers = ["system", "drain/s 1 proc loopback", "drain/s 1 proc relay", "relay / loopback",
               "enqueue/s loopback", "enqueue/s relay", "p50 ms @100/s relay",
               "p99 ms @100/s relay", "p50 in round trips", "dtq / peer drain relay"]
    rows = []
    for n in names:
        if n not in nres:
            continue
        loop_d, net_d = median_of(results[n], "drain_1p"), median_of(nres[n], "drain_1p")
        p50 = median_of(nres[n], "lat100_p50")
        ratio = ratio_of(nres["dtq"], nres[n], "drain_1p") if "dtq" in nres and n != "dtq" else None
        rows.append([n, fmt(loop_d), fmt(net_d),
                     fmt(net_d / loop_d) if net_d and loop_d else "—",
                     fmt(median_of(results[n], "enqueue")), fmt(median_of(nres[n], "enqueue")),
                     fmt(p50), fmt(median_of(nres[n], "lat100_p99")),
                     fmt(p50 / rtt) if p50 and rtt else "—", fmt(ratio)])
    lines = ["## Over a network (delay relay)", "",
             f"Every system again, through a TCP relay on 127.0.0.1 that holds each "
             f"client-to-server chunk {net['delay_ms']:g} ms (this kernel has no netem). "
             f"Measured PING round trip: {net['rtt_direct_ms']:.3f} ms direct, "
             f"{rtt:.3f} ms through the relay. {net['n']} pre-queued no-op tasks per drain; "
             f"latency at 100 tasks/s as above. The relay is a Python process on the same "
             f"cores.", "", *_table(headers, rows), ""]
    net_notes = [f"- {k}: {x}" for k, xs in net.get("notes", {}).items() for x in xs]
    return lines + ([*net_notes, ""] if net_notes else [])


def chart(path: str, names: list[str], results: dict[str, Runs], meta: dict[str, Any]) -> None:
    """Grid of bar charts, one per column, medians per system (dtq highlighted)."""
    panels = [(results, key, header, better) for key, header, better in COLUMNS]
    net = meta.get("network")
    if net:  # a fourth row: the same systems through the delay relay
        panels += [(net["results"], key, f"{header} via relay", better)
                   for key, header, better in NETWORK_PANELS]
    rows = (len(panels) + 4) // 5
    fig, axes = plt.subplots(rows, 5, figsize=(20, 3.7 * rows), layout="constrained")
    colors = ["#d62728" if n == "dtq" else "#1f77b4" for n in names]
    for ax, (source, key, header, better) in zip(axes.flat, panels, strict=False):
        meds = [median_of(source.get(n, []), key) for n in names]
        vals = [v or 0.0 for v in meds]
        ax.bar(range(len(names)), vals, color=colors)
        for i, v in enumerate(meds):
            if v is None:  # x in data units, y in axes units: works on log axes too
                ax.text(i, 0.02, "n/a", transform=ax.get_xaxis_transform(), ha="center",
                        va="bottom", fontsize=7)
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
        direction = "higher" if better == "hi" else "lower"
        ax.set_title(f"{_h(header, meta['plan'].cores)} ({direction} is better)", fontsize=9)
        if key.startswith("lat") and any(vals):
            ax.set_yscale("log")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"dtq benchmark {meta['date']} — median of {meta['runs']} run(s)")
    fig.savefig(path, dpi=80)
    plt.close(fig)
