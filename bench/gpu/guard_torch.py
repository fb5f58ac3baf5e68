"""Workloads for bench/gpu/guard_on_gpu.sh: PyTorch programs run under libmgpu-guard.so on a real GPU.

  mem     prints torch.cuda.mem_get_info, then allocates 256 MiB tensors until PyTorch raises its OOM
  hold    allocates --mib MiB and keeps it for --seconds (a second process of the same container)
  matmul  multiplies two bf16 --n x --n matrices in a loop, --batch products per synchronisation
  graph   the same, replaying a CUDA graph of --batch products (cudaGraphLaunch -> cuGraphLaunch)
  burst   online traffic: --on seconds of matmul, --off seconds idle, --cycles times
  tiny    launch-bound: --seconds of one-element additions, synchronised every 1000 (launches/s)
  train   a training step of a small MLP (forward, backward, AdamW) for --seconds (steps/s)
  nvml    allocates --mib MiB, then reads what NVML says of the card from inside this process
matmul, graph and burst initialise CUDA, then wait until the wall-clock time --start-at (so that processes of
one scenario start together however long their imports took) and stop at --stop-at; --log writes "# pid <pid>"
(the pid NVML's samples name), then one line per synchronised batch: wall time, products done, the card time
the batch took by CUDA events in ms, and 1 when a launch of the batch waited (the guard held it: its event
time then includes the wait) else 0 (burst adds "# busy <t0> <t1>" lines). Before each batch a one-element
addition takes any wait the guard imposes, so that the events time the products alone; alone on the card,
the event times add up to the process's card time. hold --stop-file waits for that file instead of --seconds.
Every mode prints one JSON line.
"""
import argparse
import json
import os
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("mode", choices=["mem", "hold", "matmul", "graph", "burst", "tiny", "train", "nvml"])
p.add_argument("--seconds", type=float, default=4.0)
p.add_argument("--warmup", type=float, default=0.5)
p.add_argument("--start-at", type=float, default=0.0)
p.add_argument("--stop-at", type=float, default=0.0)
p.add_argument("--mib", type=int, default=0)
p.add_argument("--on", type=float, default=1.0)
p.add_argument("--off", type=float, default=1.0)
p.add_argument("--cycles", type=int, default=3)
p.add_argument("--n", type=int, default=8192)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--log")
p.add_argument("--stop-file")
a = p.parse_args()

MiB = 1 << 20


def info():
    free, total = torch.cuda.mem_get_info()
    return {"free_mib": free // MiB, "total_mib": total // MiB}


def emit(d):
    print(json.dumps(d), flush=True)


def wait_until(t):
    while t and time.time() < t:
        time.sleep(min(0.05, t - time.time()))


def nvml_view():
    """What NVML answers in this process (the guard's NVML hooks when it is preloaded)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nvml_probe
    return nvml_probe.slice_view(nvml_probe.device())


if a.mode == "mem":
    before = info()
    chunks, oom = [], None
    try:
        while len(chunks) < 4096:
            chunks.append(torch.empty(256 * MiB, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError as e:
        oom = str(e).splitlines()[0][:160]
    full = info()
    got = len(chunks) * 256
    chunks.clear()
    torch.cuda.empty_cache()
    emit({"mode": "mem", "before": before, "allocated_mib": got, "oom": oom, "at_oom": full,
          "after_free": info()})
elif a.mode == "hold":
    t = torch.empty(a.mib * MiB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    emit({"mode": "hold", "pid": os.getpid(), "held_mib": a.mib, "info": info()})
    end = time.time() + a.seconds
    while time.time() < end and not (a.stop_file and os.path.exists(a.stop_file)):
        time.sleep(0.05)
elif a.mode == "nvml":
    t = torch.empty(a.mib * MiB, dtype=torch.uint8, device="cuda") if a.mib else None
    torch.cuda.synchronize()
    emit({"mode": "nvml", "allocated_mib": a.mib, "torch": info(), "nvml": nvml_view()})
elif a.mode == "tiny":
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()

    def run(seconds):
        n, t0 = 0, time.time()
        while time.time() < t0 + seconds:
            for _ in range(1000):
                x.add_(1)
            torch.cuda.synchronize()
            n += 1000
        return n / (time.time() - t0)

    run(a.warmup)
    emit({"mode": "tiny", "launches_per_s": round(run(a.seconds))})
elif a.mode == "train":
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(2048, 2048), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(2048, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    xb = torch.randn(512, 2048, device="cuda")
    yb = torch.randint(0, 10, (512,), device="cuda")

    def run(seconds):
        n, t0 = 0, time.time()
        while time.time() < t0 + seconds:
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            n += 1
            if n % 10 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        return n / (time.time() - t0)

    run(a.warmup)
    emit({"mode": "train", "steps_per_s": round(run(a.seconds), 2)})
else:
    x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    z = torch.empty_like(x)
    for _ in range(2):
        torch.matmul(x, y, out=z)  # loads cuBLAS
    torch.cuda.synchronize()
    step = None
    if a.mode == "graph":
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.matmul(x, y, out=z)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            for _ in range(a.batch):
                torch.matmul(x, y, out=z)
        g.replay()
        torch.cuda.synchronize()
        step = g.replay
    else:
        def step():
            for _ in range(a.batch):
                torch.matmul(x, y, out=z)
    log = open(a.log, "w") if a.log else None
    if log:
        log.write(f"# pid {os.getpid()}\n")
    one = torch.zeros(1, device="cuda")
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    wait_until(a.start_at)
    start = time.time()
    stop = a.stop_at or start + a.warmup + a.seconds

    def run_until(deadline, done):
        while time.time() < deadline:
            one.add_(1)  # any wait for the share falls here, before the events
            begin.record()
            launched = time.perf_counter()
            step()
            held = time.perf_counter() - launched > 0.001
            end.record()
            torch.cuda.synchronize()
            done += a.batch
            if log:
                log.write(f"{time.time():.4f} {done} {begin.elapsed_time(end):.3f} {int(held)}\n")
        return done

    if a.mode in ("matmul", "graph"):
        warm = run_until(min(stop, start + a.warmup), 0)
        t0 = time.time()
        done = run_until(stop, warm)
        rate = (done - warm) / max(time.time() - t0, 1e-9)
        emit({"mode": a.mode, "products_per_s": round(rate, 1), "start": start, "end": time.time()})
    else:
        windows, done = [], 0
        for _ in range(a.cycles):
            time.sleep(a.off)
            t0 = time.time()
            before = done
            done = run_until(t0 + a.on, done)
            windows.append([t0, time.time(), done - before])
            if log:
                log.write(f"# busy {t0:.4f} {time.time():.4f}\n")
        rate = sum(w[2] for w in windows) / sum(w[1] - w[0] for w in windows)
        emit({"mode": "burst", "products_per_s_busy": round(rate, 1), "windows": windows})
    if log:
        log.close()
