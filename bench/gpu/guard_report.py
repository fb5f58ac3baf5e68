"""The figures of one bench/gpu/guard_on_gpu.sh run, from its work directory: results.json and summary.txt.

  python3 bench/gpu/guard_report.py WORK_DIR OUT_DIR

Every process a scenario runs under the guard must show in its stderr that the guard attached ("guarding ...
for container token=..."); one that does not (the guard stepped aside, with its sentence) gets no share, and
the summary says so. Each process's share is reported three ways:
  time  its share of the card's time by NVML's per-process samples ("<stamp us> <pid> <sm percent>", read by
        an unguarded sampler): a sample covers the sample period before its stamp (the period is the usual
        spacing of the stamps, reported), weighted by its overlap with the measured window. The judge: within
        2 points of the share asked, the card's idle time (100 less every process's time) at most 3 points
        where the shares add up to 100. Where NVML names one process per sample, a share moves in steps of
        one sample's worth of the window (reported: a 4 s window of 200 ms samples, 5 points).
  thr   its throughput, a percent of the unguarded alone rate (from its log: one line per synchronised batch:
        wall time, products done, the batch's card time by CUDA events, whether a launch of it waited). A card
        busy part of the time runs faster per busy second, and time-sliced contexts lose time switching, so
        thr differs from time; "split" is its part of the scenario's summed throughput, which in a saturated
        card is its part of the card's time.
  busy  alone on the card: its card time by CUDA events over the window (batches with a held launch count as
        the median batch).
Old logs (two columns, no samples file) are read too: time and busy are then n/a.
"""
import glob
import json
import os
import statistics
import sys

work, out = sys.argv[1], sys.argv[2]
results, lines, problems = {}, [], []
POINTS, MOST_IDLE = 2.0, 3.0


def path(name):
    return os.path.join(work, name)


def load_json(name):
    try:
        with open(path(name)) as f:
            rows = [json.loads(l) for l in f if l.strip().startswith("{")]
        return rows[-1] if rows else None
    except (OSError, ValueError):
        return None


def read_text(name):
    try:
        with open(path(name)) as f:
            return f.read()
    except OSError:
        return None


def guard_state(err_name):
    """(attached, sentence): whether the guard attached in the process whose stderr is `err_name`."""
    text = read_text(err_name)
    if text is None:
        return False, "no stderr file"
    for line in text.splitlines():
        if "steps aside" in line:
            return False, line.split(": ", 1)[-1].strip()
    if "guarding" in text:
        return True, ""
    return False, "the guard never said it attached"


class Log:
    def __init__(self, name):
        self.pid, self.points, self.events, self.busy = None, [], [], []
        try:
            with open(path(name)) as f:
                for line in f:
                    parts = line.split()
                    if line.startswith("# pid"):
                        self.pid = int(parts[2])
                    elif line.startswith("# busy"):
                        self.busy.append((float(parts[2]), float(parts[3])))
                    elif len(parts) >= 2 and not line.startswith("#"):
                        self.points.append((float(parts[0]), float(parts[1])))
                        if len(parts) >= 4:
                            self.events.append((float(parts[0]), float(parts[2]) / 1000, parts[3] == "1"))
        except (OSError, ValueError):
            pass


def done_at(points, t):
    """Products done by time t, interpolated between batches."""
    if not points or t <= points[0][0]:
        return points[0][1] if points else 0.0
    for (t0, d0), (t1, d1) in zip(points, points[1:]):
        if t <= t1:
            return d0 + (d1 - d0) * (t - t0) / (t1 - t0) if t1 > t0 else d1
    return points[-1][1]


def rate(points, a, b):
    return (done_at(points, b) - done_at(points, a)) / (b - a) if b > a else 0.0


def event_busy(log, a, b):
    """Percent of [a, b] its batches held the card, by CUDA events (held batches count as the median)."""
    rows = [(t, s, held) for t, s, held in log.events if a < t <= b]
    clean = [s for _, s, held in rows if not held]
    if len(clean) < 3:
        return None
    median = statistics.median(clean)
    return round(100 * sum(median if held else s for _, s, held in rows) / (b - a), 1)


class Samples:
    """NVML's per-process utilisation samples, as the unguarded sampler logged them."""

    def __init__(self, name):
        self.rows = []
        try:
            with open(path(name)) as f:
                for line in f:
                    stamp, pid, sm = line.split()
                    self.rows.append((int(stamp) / 1e6, int(pid), int(sm)))
        except (OSError, ValueError, TypeError):
            pass
        stamps = sorted({r[0] for r in self.rows})
        spacings = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
        self.period = statistics.median(spacings) if spacings else None

    def time_share(self, pid, a, b):
        if not self.period or pid is None:
            return None
        covered = 0.0
        for stamp, p, sm in self.rows:
            if p == pid:
                overlap = min(stamp, b) - max(stamp - self.period, a)
                if overlap > 0:
                    covered += sm / 100 * overlap
        return round(100 * covered / (b - a), 1)

    def pids_per_stamp(self, a, b):
        """How many processes the samples of one stamp name, on average, within [a, b]."""
        by = {}
        for stamp, p, _ in self.rows:
            if a <= stamp <= b:
                by.setdefault(stamp, set()).add(p)
        return round(statistics.mean(len(s) for s in by.values()), 2) if by else None

    def stamps(self, a, b):
        """How many sample periods end within [a, b]: where NVML names one process per sample (an H200), a
        share of that window is counted in steps of one period's worth, 100 * period / (b - a) points."""
        return len({stamp for stamp, _, _ in self.rows if a <= stamp <= b})

    def mean_sm(self, pid, a, b):
        vals = [sm for stamp, p, sm in self.rows if p == pid and a <= stamp <= b]
        return round(statistics.mean(vals), 1) if vals else None


def card(name, a, b):
    """Means over [a, b] of the card's GPU-Util, SM clock (MHz) and power (W), from the sampler."""
    cols = [[], [], []]
    try:
        with open(path(name)) as f:
            for line in f:
                parts = line.split()
                if parts and a <= float(parts[0]) <= b:
                    for i, v in enumerate(parts[1:4]):
                        cols[i].append(float(v))
    except (OSError, ValueError):
        pass
    return [round(statistics.mean(c), 1) if c else None for c in cols]


def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:.{digits}f}"


plan = []
try:
    with open(path("scenarios.jsonl")) as f:
        plan = [json.loads(l) for l in f if l.strip()]
except (OSError, ValueError) as e:
    problems.append(f"plan: {e}")
by_name = {s["name"]: s for s in plan}
lines.append(f"GPU: {(read_text('gpu.txt') or 'n/a').strip()}")

# The unguarded alone rate every throughput share is a percent of.
alone = None
if "alone" in by_name:
    pts = Log(by_name["alone"]["procs"][0]["log"]).points
    if len(pts) > 2:
        alone = rate(pts, pts[0][0] + 0.5, pts[-1][0])
results["alone_products_per_s"] = alone and round(alone, 1)
lines.append(f"alone, unguarded: {fmt(alone)} products/s (bf16 8192^3) = 100 (thr)")


def proc_err(s, i, p):
    return p.get("err") or f"{s['name']}-{i}.err"


def share_scenario(s):
    logs = [Log(p["log"]) for p in s["procs"]]
    if not alone or any(len(l.points) < 3 for l in logs):
        return {"error": "missing or short logs"}
    a = max(l.points[0][0] for l in logs) + 0.5
    b = min(l.points[-1][0] for l in logs)
    samples = Samples(s.get("samples", ""))
    util, clock, power = card(s["util"], a, b)
    procs, all_time = [], 0.0
    thr_sum = sum(rate(l.points, a, b) for l in logs)
    for i, (p, log) in enumerate(zip(s["procs"], logs)):
        r = {"asked": p["share"], "qos": p["qos"], "pid": log.pid}
        if p["share"] != "-":
            attached, why = guard_state(proc_err(s, i, p))
            r["guarded"] = attached
            if not attached:
                r["unguarded_because"] = why
        thr = rate(log.points, a, b)
        r["thr"] = round(100 * thr / alone, 1)
        r["split"] = round(100 * thr / thr_sum, 1) if len(logs) > 1 and thr_sum else None
        r["time"] = samples.time_share(log.pid, a, b)
        r["sm_mean"] = samples.mean_sm(log.pid, a, b)
        r["busy"] = event_busy(log, a, b) if len(logs) == 1 else None
        if r["time"] is not None:
            all_time += r["time"]
        procs.append(r)
    # Every process of the card the sampler saw counts in the idle time, ours or not.
    others = sum(samples.time_share(pid, a, b) or 0 for pid in {row[1] for row in samples.rows}
                 if pid not in {l.pid for l in logs}) if samples.period else 0
    have_time = samples.period is not None and all(r["time"] is not None for r in procs)
    return {"window_s": round(b - a, 2), "procs": procs, "sample_period_ms": samples.period and
            round(1000 * samples.period, 1), "pids_per_stamp": samples.pids_per_stamp(a, b),
            "samples_in_window": samples.stamps(a, b),
            "points_per_sample": round(100 * samples.period / (b - a), 1) if samples.period and b > a else None,
            "idle_by_time": round(100 - all_time - others, 1) if have_time else None,
            "idle_by_thr": round(100 - sum(r["thr"] for r in procs), 1),
            "gpu_util": util, "sm_clock_mhz": clock, "power_w": power}


lines.append("shares, per process asked->time/thr[/split][/busy] (time: NVML samples, the judge; thr: of the alone "
             "rate; split: of the scenario's throughput; busy: CUDA events, alone), idle by time, card")
judged, misses, unguarded_procs, periods = 0, [], [], set()
for s in plan:
    if s["kind"] not in ("share", "graph"):
        continue
    r = share_scenario(s)
    results[s["name"]] = r
    if "error" in r:
        lines.append(f"  {s['name']:22s} {r['error']}")
        continue
    cells = []
    for p in r["procs"]:
        if p.get("guarded") is False:
            cells.append(f"{p['asked']}->UNGUARDED")
            unguarded_procs.append(f"{s['name']} ({p['unguarded_because']})")
            continue
        cell = f"{p['asked']}->{fmt(p['time'])}/{fmt(p['thr'])}"
        if p["split"] is not None:
            cell += f"/{fmt(p['split'])}"
        if p["busy"] is not None:
            cell += f"/{fmt(p['busy'])}"
        cells.append(cell)
    if r["sample_period_ms"]:
        periods.add(r["sample_period_ms"])
    lines.append(f"  {s['name']:22s} {' '.join(cells):44s} idle {fmt(r['idle_by_time'])} (GPU-Util "
                 f"{fmt(r['gpu_util'])}, SM {fmt(r['sm_clock_mhz'], 0)} MHz, {fmt(r['power_w'], 0)} W, "
                 f"{fmt(r['pids_per_stamp'], 2)} pids/sample, {r['samples_in_window']} samples of "
                 f"{fmt(r['points_per_sample'])} points)")
    offline = any(p["qos"] == "offline" for p in r["procs"])
    promised = offline or s["policy"] == "fixed-share" or (
        s["policy"] == "guaranteed-burst-share" and len(r["procs"]) > 1)
    if s["kind"] != "share" or not promised or any(p["asked"] == "-" or p.get("guarded") is False
                                                   for p in r["procs"]):
        continue
    for p in r["procs"]:
        if p["time"] is None:
            continue
        judged += 1
        if abs(float(p["asked"]) - p["time"]) > POINTS:
            misses.append(f"{s['name']} {p['asked']}->{p['time']}")
    if sum(float(p["asked"]) for p in r["procs"]) == 100 and r["idle_by_time"] is not None and \
            r["idle_by_time"] > MOST_IDLE:
        misses.append(f"{s['name']} idle {r['idle_by_time']}")
results["judged_shares"] = judged
results["misses"] = misses
results["unguarded_processes"] = unguarded_procs
lines.append(f"  judged by time: {judged} shares; outside 2 points (or idle over 3): "
             f"{'; '.join(misses) if misses else 'none'}; NVML sample period {sorted(periods) or 'n/a'} ms")
if unguarded_procs:
    by_reason = {}
    for entry in unguarded_procs:
        name, why = entry.split(" (", 1)
        by_reason.setdefault(why.rstrip(")"), []).append(name)
    for why, names in by_reason.items():
        lines.append(f"  NOT GUARDED, so no share reported: {len(names)} processes of {', '.join(sorted(set(names)))}: "
                     f"{why}")
if "graph-unguarded" in results and "procs" in results.get("graph-fixed-30", {}) and \
        "procs" in results["graph-unguarded"]:
    g0, g1 = results["graph-unguarded"]["procs"][0]["thr"], results["graph-fixed-30"]["procs"][0]["thr"]
    if g0:
        results["graph_share_of_unguarded_graph_rate"] = round(100 * g1 / g0, 1)
        lines.append(f"  CUDA graph replays under fixed-share 30: {results['graph_share_of_unguarded_graph_rate']} "
                     f"percent of the unguarded graph rate")


def settle(series, start, end, target, tolerance):
    """Seconds after `start` from which every 1 s window's value (`series(t0, t1)`, sliding by 0.1 s) is
    within tolerance of target; None: never."""
    t, settled = start, None
    while t + 1.0 <= end:
        if abs(series(t, t + 1.0) - target) > tolerance:
            settled = None
        elif settled is None:
            settled = t
        t += 0.1
    return None if settled is None else round(settled - start, 2)


def guarded_all(s):
    bad = [f"{s['name']}-{i}: {why}" for i, p in enumerate(s["procs"])
           for attached, why in [guard_state(proc_err(s, i, p))] if p["share"] != "-" and not attached]
    return bad


if alone and "settle-start" in by_name:
    s = by_name["settle-start"]
    bad = guarded_all(s)
    big, small = (Log(p["log"]) for p in s["procs"])
    if bad:
        lines.append(f"settle after a start: NOT GUARDED ({'; '.join(bad)})")
    elif big.points and small.points:
        # The card is saturated once the 30 joins: each one's part of the pair's throughput is its part of the
        # card's time (thr alone would carry the cost of switching between the two contexts).
        event, end = small.points[0][0], min(big.points[-1][0], small.points[-1][0])

        def split(log):
            return lambda a, b: 100 * rate(log.points, a, b) / max(rate(big.points, a, b) + rate(small.points, a, b),
                                                                    1e-9)

        samples = Samples(s.get("samples", ""))
        r = {"newcomer_30": {f"within_{tol}": settle(split(small), event, end, 30, tol) for tol in (2, 5)},
             "neighbour_70": {f"within_{tol}": settle(split(big), event, end, 70, tol) for tol in (2, 5)},
             "newcomer_time_from_1s": samples.time_share(small.pid, event + 1, end),
             "neighbour_time_from_1s": samples.time_share(big.pid, event + 1, end)}
        results["settle_after_start"] = r
        lines.append(f"settle after a start (fixed 30 joins 70; s until every 1 s window of its part of the pair's "
                     f"throughput is within 2 / 5 points): 30: {r['newcomer_30']['within_2']} / "
                     f"{r['newcomer_30']['within_5']}, 70: {r['neighbour_70']['within_2']} / "
                     f"{r['neighbour_70']['within_5']}; time from 1 s after the start: "
                     f"{fmt(r['newcomer_time_from_1s'])} / {fmt(r['neighbour_time_from_1s'])}")
if alone and "settle-exit" in by_name:
    s = by_name["settle-exit"]
    bad = guarded_all(s)
    gone, stays = (Log(p["log"]) for p in s["procs"])
    if bad:
        lines.append(f"settle after an exit: NOT GUARDED ({'; '.join(bad)})")
    elif gone.points and stays.points:
        event, end = gone.points[-1][0], stays.points[-1][0]
        # Alone, a guaranteed-burst-share takes the whole card: its target is its own rate over the last 2 s.
        target = 100 * rate(stays.points, end - 2, end) / alone
        r = {"target_thr": round(target, 1),
             "pair_split_30": round(100 * rate(stays.points, stays.points[0][0] + 0.5, event) /
                                    max(rate(stays.points, stays.points[0][0] + 0.5, event) +
                                        rate(gone.points, stays.points[0][0] + 0.5, event), 1e-9), 1),
             **{f"within_{tol}": settle(lambda a, b: 100 * rate(stays.points, a, b) / alone, event, end, target, tol)
                for tol in (2, 5)}}
        results["settle_after_exit"] = r
        lines.append(f"settle after a neighbour's exit (guaranteed 30, its 70 exits; target its rate alone, "
                     f"{fmt(target)} thr; its part of the pair before: {r['pair_split_30']}): {r['within_2']} / "
                     f"{r['within_5']} s (within 2 / 5 points)")

for name in ("offline-release-10", "offline-release-default"):
    s = by_name.get(name)
    if not s or not alone:
        continue
    bad = [f"{e}: {why}" for e in s.get("errs", []) for attached, why in [guard_state(e)] if not attached]
    online, off = Log(s["online"]), Log(s["offline"])
    busy = online.busy
    if bad or not busy or len(off.points) < 3:
        results[name] = {"error": f"not guarded: {bad}" if bad else "missing logs"}
        lines.append(f"{name}: {results[name]['error']}")
        continue
    held = [100 * rate(off.points, b0 + 0.1, b1) / alone for b0, b1 in busy]
    idle_windows = [(busy[i][1] + 0.2, busy[i + 1][0]) for i in range(len(busy) - 1)]
    free = [100 * rate(off.points, a, b) / alone for a, b in idle_windows]
    delays = []
    for _, b1 in busy:
        after = [t for t, _ in off.points if t > b1]
        if after:
            delays.append(round(1000 * (after[0] - b1)))
    on_busy = [100 * rate(online.points, b0, b1) / alone for b0, b1 in busy]
    r = {"offline_share_while_online_busy": round(statistics.mean(held), 1),
         "offline_share_while_online_idle": round(statistics.mean(free), 1) if free else None,
         "offline_first_batch_after_online_last_ms": delays,
         "online_share_while_busy": round(statistics.mean(on_busy), 1)}
    results[name] = r
    lines.append(f"{name}: offline {r['offline_share_while_online_busy']} while online works, "
                 f"{r['offline_share_while_online_idle']} while it idles; first offline batch done "
                 f"{delays} ms after online's last; online keeps {r['online_share_while_busy']}")

cost, cost_bad = {}, []
for f in sorted(glob.glob(path("cost-*-*-*.json"))):
    _, rnd, who, mode = os.path.basename(f)[:-5].split("-")
    if who != "unguarded":
        attached, why = guard_state(os.path.basename(f)[:-5] + ".err")
        if not attached:
            cost_bad.append(f"{os.path.basename(f)[:-5]}: {why}")
            continue
    j = load_json(os.path.basename(f))
    if j:
        cost.setdefault(mode, {}).setdefault(who, []).append(j.get("launches_per_s") or j.get("steps_per_s"))
results["cost"] = cost
for mode, label in (("tiny", "launch-bound (one-element additions), launches/s"), ("train", "training step, steps/s")):
    c = cost.get(mode, {})
    base = c.get("unguarded")
    if not base:
        continue
    parts = [f"unguarded {base}"]
    for who in ("native", "fixed100"):
        if c.get(who):
            pct = [round(100 * g / u, 1) for g, u in zip(c[who], base) if u]
            results[f"cost_{mode}_{who}_percent"] = pct
            parts.append(f"{who} {c[who]} = {pct} percent")
    lines.append(f"cost, {label}: " + "; ".join(parts) + " (goal: within 2 percent)")
if cost_bad:
    lines.append(f"cost: NOT GUARDED, left out: {'; '.join(cost_bad)}")

startup = {}
for who in ("unguarded", "guarded"):
    try:
        wall = float(read_text(f"startup-{who}-wall.txt"))
    except (TypeError, ValueError):
        continue
    times, errors = [], []
    for f in glob.glob(path(f"startup-{who}-*.txt")):
        if f.endswith("-wall.txt"):
            continue
        text = open(f).read().strip()
        try:
            times.append(float(text.splitlines()[-1]))
        except (ValueError, IndexError):
            errors.append(text[:120])
    startup[who] = {"wall_s": wall, "processes_ok": len(times), "errors": errors[:3],
                    "p50_ms": round(statistics.median(times), 1) if times else None,
                    "max_ms": round(max(times), 1) if times else None}
results["startup_100"] = startup
if startup:
    u, g = startup.get("unguarded", {}), startup.get("guarded", {})
    ratio = round(g["wall_s"] / u["wall_s"], 2) if u.get("wall_s", 0) > 0 and "wall_s" in g else None
    results["startup_ratio"] = ratio
    lines.append(f"startup of 100 processes at once: unguarded {u.get('wall_s')} s (p50 {u.get('p50_ms')} ms, "
                 f"{u.get('processes_ok')} ok), guarded {g.get('wall_s')} s (p50 {g.get('p50_ms')} ms, "
                 f"{g.get('processes_ok')} ok): {ratio}x (goal at most 2x)")

mem = load_json("mem-guarded.json")
second = load_json("mem-second-process.json")
results["memory"] = {"guarded": mem, "second_process": second, "holder": load_json("hold.json")}
if mem:
    lines.append(f"memory, cap 4096 MiB: mem_get_info {mem['before']}, allocated {mem['allocated_mib']} MiB before "
                 f"PyTorch's OOM ({(mem['oom'] or 'no OOM')[:60]})")
if second:
    lines.append(f"  second process beside one holding 3072 MiB: {second['before']}, allocated "
                 f"{second['allocated_mib']} MiB")
nv = {"slice_guarded": load_json("nvml-slice.json"), "slice_unguarded": load_json("nvml-slice-unguarded.json"),
      "in_torch": load_json("nvml-in-torch.json")}
for name in ("nvidia-smi-query.txt", "nvidia-smi-apps.txt", "nvidia-smi-apps-unguarded.txt",
             "nvidia-smi-nvml-symbols.txt"):
    text = read_text(name)
    nv[name] = text.strip() if text is not None else None
results["nvml"] = nv
if nv["slice_guarded"]:
    g = nv["slice_guarded"]
    lines.append(f"NVML in the container (one process holds 1024 MiB, cap 4096): memory v1 {g['memory_v1']}, "
                 f"v2 total {g['memory_v2']['total_mib']} used {g['memory_v2']['used_mib']}, "
                 f"processes {g['processes_v3']['list']}")
if nv["slice_unguarded"]:
    lines.append(f"  the same unguarded: total {nv['slice_unguarded']['memory_v1']['total_mib']} MiB, "
                 f"processes {nv['slice_unguarded']['processes_v3']['list'][:4]}")
if nv["in_torch"]:
    t = nv["in_torch"]
    lines.append(f"  inside a PyTorch process holding 512 MiB: torch {t['torch']}, NVML v2 total "
                 f"{t['nvml']['memory_v2']['total_mib']} used {t['nvml']['memory_v2']['used_mib']}, "
                 f"processes {t['nvml']['processes_v3']['list']}")
holder = load_json("nv.json")
if nv["nvidia-smi-apps.txt"] is not None or nv["nvidia-smi-query.txt"] is not None:
    lines.append(f"nvidia-smi in the container (its holder, pid {holder and holder.get('pid')}, holds 1024 MiB): "
                 f"--query-gpu {nv['nvidia-smi-query.txt']!r}; --query-compute-apps {nv['nvidia-smi-apps.txt']!r} "
                 f"(unguarded: {nv['nvidia-smi-apps-unguarded.txt']!r})")
if nv["nvidia-smi-nvml-symbols.txt"] is not None:
    names = [l.split("`")[-1].rstrip("'") for l in nv["nvidia-smi-nvml-symbols.txt"].splitlines()]
    shown = names if len(names) <= 40 else [n for n in names if any(w in n for w in ("Process", "Utilization",
                                                                                        "Memory", "Internal"))]
    lines.append(f"  NVML functions nvidia-smi binds ({len(names)} in all){'' if shown is names else ', of processes, memory, use and internal'}: "
                 f"{', '.join(shown) or 'none'}")

status = (read_text("status.txt") or "").strip().splitlines()
results["parts"] = status
results["problems"] = problems
lines.append("parts: " + "; ".join(status))
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(results, f, indent=1, default=str)
with open(os.path.join(out, "summary.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
