"""The figures of one bench/gpu/guard_on_gpu.sh run, from its work directory: results.json and summary.txt.

  python3 bench/gpu/guard_report.py WORK_DIR OUT_DIR

Rates come from the workloads' logs (one line per synchronised batch: wall time, products done), over the
time every process of a scenario was running; a share is a percent of the unguarded alone rate. Each part
that is missing or failed is reported as such; the others are computed all the same.
"""
import glob
import json
import os
import statistics
import sys

work, out = sys.argv[1], sys.argv[2]
results, lines, problems = {}, [], []


def path(name):
    return os.path.join(work, name)


def load_json(name):
    try:
        with open(path(name)) as f:
            rows = [json.loads(l) for l in f if l.strip().startswith("{")]
        return rows[-1] if rows else None
    except (OSError, ValueError):
        return None


def read_log(name):
    points, busy = [], []
    try:
        with open(path(name)) as f:
            for line in f:
                parts = line.split()
                if line.startswith("# busy"):
                    busy.append((float(parts[2]), float(parts[3])))
                elif len(parts) == 2:
                    points.append((float(parts[0]), float(parts[1])))
    except OSError:
        pass
    return points, busy


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


def mean_util(name, a, b):
    vals = []
    try:
        with open(path(name)) as f:
            for line in f:
                t, u = line.split()
                if a <= float(t) <= b:
                    vals.append(float(u))
    except (OSError, ValueError):
        return None
    return round(statistics.mean(vals), 1) if vals else None


def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:.{digits}f}"


plan = []
try:
    with open(path("scenarios.jsonl")) as f:
        plan = [json.loads(l) for l in f if l.strip()]
except (OSError, ValueError) as e:
    problems.append(f"plan: {e}")
by_name = {s["name"]: s for s in plan}

# The unguarded alone rate every share is a percent of.
alone = None
if "alone" in by_name:
    pts, _ = read_log(by_name["alone"]["procs"][0]["log"])
    if len(pts) > 2:
        alone = rate(pts, pts[0][0] + 0.5, pts[-1][0])
results["alone_products_per_s"] = alone and round(alone, 1)
lines.append(f"GPU: {open(path('gpu.txt')).read().strip() if os.path.exists(path('gpu.txt')) else 'n/a'}")
lines.append(f"alone, unguarded: {fmt(alone)} products/s (bf16 8192^3) = 100")


def share_scenario(s):
    logs = [read_log(p["log"])[0] for p in s["procs"]]
    if not alone or any(len(pts) < 3 for pts in logs):
        return {"error": "missing or short logs"}
    a = max(pts[0][0] for pts in logs) + 0.5
    b = min(pts[-1][0] for pts in logs)
    shares = [round(100 * rate(pts, a, b) / alone, 1) for pts in logs]
    util = mean_util(s["util"], a, b)
    return {"window_s": round(b - a, 2), "shares": shares, "asked": [p["share"] for p in s["procs"]],
            "idle_by_products": round(100 - sum(shares), 1), "gpu_util": util,
            "idle_by_gpu_util": None if util is None else round(100 - util, 1)}


lines.append("shares (percent of the alone rate; idle = 100 - their sum; GPU-Util = NVML's card utilisation):")
worst, idle_worst = 0.0, 0.0
for s in plan:
    if s["kind"] not in ("share", "graph"):
        continue
    r = share_scenario(s)
    results[s["name"]] = r
    if "error" in r:
        lines.append(f"  {s['name']:24s} {r['error']}")
        continue
    pairs = " ".join(f"{q}->{g}" for q, g in zip(r["asked"], r["shares"]))
    lines.append(f"  {s['name']:24s} {pairs:30s} idle {fmt(r['idle_by_products'])} "
                 f"(GPU-Util {fmt(r['gpu_util'])})")
    offline = any(p["qos"] == "offline" for p in s["procs"])
    promised = offline or s["policy"] == "fixed-share" or (
        s["policy"] == "guaranteed-burst-share" and len(r["asked"]) > 1)
    if s["kind"] == "share" and promised and "-" not in r["asked"]:
        worst = max([worst] + [abs(float(q) - g) for q, g in zip(r["asked"], r["shares"])])
        if sum(float(q) for q in r["asked"]) == 100:
            idle_worst = max(idle_worst, r["idle_by_products"])
results["worst_share_error_points"] = round(worst, 1)
results["worst_idle_when_shares_add_to_100"] = round(idle_worst, 1)
lines.append(f"  worst share error {worst:.1f} points (goal 2); worst idle at 100 percent {idle_worst:.1f} (goal 3)")
if "graph-unguarded" in results and "graph-fixed-30" in results and "shares" in results.get("graph-fixed-30", {}):
    g0, g1 = results["graph-unguarded"].get("shares"), results["graph-fixed-30"].get("shares")
    if g0 and g1 and g0[0]:
        results["graph_share_of_unguarded_graph_rate"] = round(100 * g1[0] / g0[0], 1)
        lines.append(f"  CUDA graph replays under fixed-share 30: {results['graph_share_of_unguarded_graph_rate']} "
                     f"percent of the unguarded graph rate")


def settle(points, start, end, target, tolerance):
    """Seconds after `start` from which every 1 s window's share (sliding by 0.1 s) is within tolerance."""
    t, settled = start, None
    while t + 1.0 <= end:
        share = 100 * rate(points, t, t + 1.0) / alone
        if abs(share - target) > tolerance:
            settled = None
        elif settled is None:
            settled = t
        t += 0.1
    return None if settled is None else round(settled - start, 2)


if alone and "settle-start" in by_name:
    s = by_name["settle-start"]
    big, small = (read_log(p["log"])[0] for p in s["procs"])
    if big and small:
        event, end = small[0][0], min(big[-1][0], small[-1][0])
        r = {"newcomer_30": {f"within_{tol}": settle(small, event, end, 30, tol) for tol in (2, 5)},
             "neighbour_70": {f"within_{tol}": settle(big, event, end, 70, tol) for tol in (2, 5)}}
        results["settle_after_start"] = r
        lines.append(f"settle after a start (fixed 30 joins 70; s until every 1 s window is within 2 / 5 points): "
                     f"30: {r['newcomer_30']['within_2']} / {r['newcomer_30']['within_5']}, "
                     f"70: {r['neighbour_70']['within_2']} / {r['neighbour_70']['within_5']}")
if alone and "settle-exit" in by_name:
    s = by_name["settle-exit"]
    gone, stays = (read_log(p["log"])[0] for p in s["procs"])
    if gone and stays:
        alone_burst = (results.get("guaranteed-30") or {}).get("shares", [None])[0] or 95.0
        event = gone[-1][0]
        r = {"target": alone_burst,
             "pair_share_30": round(100 * rate(stays, stays[0][0] + 0.5, event) / alone, 1),
             **{f"within_{tol}": settle(stays, event, stays[-1][0], alone_burst, tol) for tol in (2, 5)}}
        results["settle_after_exit"] = r
        lines.append(f"settle after a neighbour's exit (guaranteed 30, its 70 exits; target its alone share "
                     f"{fmt(alone_burst)}): {r['within_2']} / {r['within_5']} s (within 2 / 5 points)")

for name in ("offline-release-10", "offline-release-default"):
    s = by_name.get(name)
    if not s or not alone:
        continue
    online, busy = read_log(s["online"])
    off, _ = read_log(s["offline"])
    if not busy or len(off) < 3:
        results[name] = {"error": "missing logs"}
        lines.append(f"{name}: missing logs")
        continue
    held = [100 * rate(off, b0 + 0.1, b1) / alone for b0, b1 in busy]
    idle_windows = [(busy[i][1] + 0.2, busy[i + 1][0]) for i in range(len(busy) - 1)]
    free = [100 * rate(off, a, b) / alone for a, b in idle_windows]
    delays = []
    for _, b1 in busy:
        after = [t for t, _ in off if t > b1]
        if after:
            delays.append(round(1000 * (after[0] - b1)))
    on_busy = [100 * rate(online, b0, b1) / alone for b0, b1 in busy]
    r = {"offline_share_while_online_busy": round(statistics.mean(held), 1),
         "offline_share_while_online_idle": round(statistics.mean(free), 1) if free else None,
         "offline_first_batch_after_online_last_ms": delays,
         "online_share_while_busy": round(statistics.mean(on_busy), 1)}
    results[name] = r
    lines.append(f"{name}: offline {r['offline_share_while_online_busy']} while online works, "
                 f"{r['offline_share_while_online_idle']} while it idles; first offline batch done "
                 f"{delays} ms after online's last; online keeps {r['online_share_while_busy']}")

cost = {}
for f in sorted(glob.glob(path("cost-*-*-*.json"))):
    _, rnd, who, mode = os.path.basename(f)[:-5].split("-")
    j = load_json(os.path.basename(f))
    if j:
        cost.setdefault(mode, {}).setdefault(who, []).append(j.get("launches_per_s") or j.get("steps_per_s"))
results["cost"] = cost
for mode, label in (("tiny", "launch-bound (one-element additions), launches/s"), ("train", "training step, steps/s")):
    c = cost.get(mode, {})
    base = c.get("unguarded")
    if not base:
        lines.append(f"cost, {label}: n/a")
        continue
    parts = [f"unguarded {base}"]
    for who in ("native", "fixed100"):
        if c.get(who):
            pct = [round(100 * g / u, 1) for g, u in zip(c[who], base) if u]
            results[f"cost_{mode}_{who}_percent"] = pct
            parts.append(f"{who} {c[who]} = {pct} percent")
    lines.append(f"cost, {label}: " + "; ".join(parts) + " (goal: within 2 percent)")

startup = {}
for who in ("unguarded", "guarded"):
    try:
        wall = float(open(path(f"startup-{who}-wall.txt")).read())
    except (OSError, ValueError):
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
hold = load_json("hold.json")
results["memory"] = {"guarded": mem, "second_process": second, "holder": hold}
if mem:
    lines.append(f"memory, cap 4096 MiB: mem_get_info {mem['before']}, allocated {mem['allocated_mib']} MiB before "
                 f"PyTorch's OOM ({(mem['oom'] or 'no OOM')[:60]})")
if second:
    lines.append(f"  second process beside one holding 3072 MiB: {second['before']}, allocated "
                 f"{second['allocated_mib']} MiB")
nv = {"slice_guarded": load_json("nvml-slice.json"), "slice_unguarded": load_json("nvml-slice-unguarded.json"),
      "in_torch": load_json("nvml-in-torch.json")}
for name in ("nvidia-smi-query.txt", "nvidia-smi-apps.txt"):
    try:
        nv[name] = open(path(name)).read().strip()
    except OSError:
        nv[name] = None
results["nvml"] = nv
if nv["slice_guarded"]:
    g = nv["slice_guarded"]
    lines.append(f"NVML in the container (one process holds 1024 MiB, cap 4096): memory v1 {g['memory_v1']}, "
                 f"v2 total {g['memory_v2']['total_mib']} used {g['memory_v2']['used_mib']}, "
                 f"processes {g['processes_v3']['list']}")
if nv["slice_unguarded"]:
    lines.append(f"  the same unguarded: total {nv['slice_unguarded']['memory_v1']['total_mib']} MiB, "
                 f"processes {nv['slice_unguarded']['processes_v3']['list'][:4]}")
lines.append(f"  nvidia-smi --query-gpu=memory.total,used,free,util: {nv['nvidia-smi-query.txt']}; "
             f"--query-compute-apps: {nv['nvidia-smi-apps.txt']!r}")
if nv["in_torch"]:
    t = nv["in_torch"]
    lines.append(f"  inside a PyTorch process holding 512 MiB: torch {t['torch']}, NVML v2 total "
                 f"{t['nvml']['memory_v2']['total_mib']} used {t['nvml']['memory_v2']['used_mib']}, "
                 f"processes {t['nvml']['processes_v3']['list']}")

try:
    status = open(path("status.txt")).read().strip().splitlines()
except OSError:
    status = []
results["parts"] = status
results["problems"] = problems
lines.append("parts: " + "; ".join(status))
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(results, f, indent=1, default=str)
with open(os.path.join(out, "summary.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
