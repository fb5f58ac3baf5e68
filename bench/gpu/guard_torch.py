"""Workloads for bench/gpu/guard_on_gpu.sh: PyTorch programs run under libmgpu-guard.so on a real GPU.

  mem     prints torch.cuda.mem_get_info, then allocates 256 MiB tensors until PyTorch raises its OOM
  hold    allocates --mib MiB and keeps it for --seconds (a second process of the same container)
  matmul  multiplies two bf16 matrices in a loop; prints the rate (products/s) after --warmup
  burst   online traffic: --on seconds of matmul, --off seconds idle, --cycles times
Every mode prints one JSON line; --log writes one line per synchronised batch: wall time, products done.
"""
import argparse
import json
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("mode", choices=["mem", "hold", "matmul", "burst"])
p.add_argument("--seconds", type=float, default=10.0)
p.add_argument("--warmup", type=float, default=2.0)
p.add_argument("--mib", type=int, default=0)
p.add_argument("--on", type=float, default=1.5)
p.add_argument("--off", type=float, default=1.5)
p.add_argument("--cycles", type=int, default=4)
p.add_argument("--n", type=int, default=8192)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--log")
a = p.parse_args()

MiB = 1 << 20


def info():
    free, total = torch.cuda.mem_get_info()
    return {"free_mib": free // MiB, "total_mib": total // MiB}


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
    print(json.dumps({"mode": "mem", "before": before, "allocated_mib": got, "oom": oom,
                      "at_oom": full, "after_free": info()}), flush=True)
elif a.mode == "hold":
    t = torch.empty(a.mib * MiB, dtype=torch.uint8, device="cuda")
    print(json.dumps({"mode": "hold", "held_mib": a.mib, "info": info()}), flush=True)
    time.sleep(a.seconds)
else:
    x = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(a.n, a.n, device="cuda", dtype=torch.bfloat16)
    z = torch.empty_like(x)
    torch.cuda.synchronize()
    log = open(a.log, "w") if a.log else None
    start = time.time()

    def run_until(deadline, done):
        while time.time() < deadline:
            for _ in range(a.batch):
                torch.matmul(x, y, out=z)
            torch.cuda.synchronize()
            done += a.batch
            if log:
                log.write(f"{time.time():.4f} {done}\n")
        return done

    if a.mode == "matmul":
        warm = run_until(start + a.warmup, 0)
        t0 = time.time()
        done = run_until(t0 + a.seconds, warm)
        rate = (done - warm) / (time.time() - t0)
        print(json.dumps({"mode": "matmul", "products_per_s": round(rate, 1)}), flush=True)
    else:
        windows, done = [], 0
        run_until(start + a.warmup, 0)  # the first products load cuBLAS: not part of a window
        for _ in range(a.cycles):
            time.sleep(a.off)
            t0 = time.time()
            before = done
            done = run_until(t0 + a.on, done)
            windows.append([t0, time.time(), done - before])
            if log:
                log.write(f"# busy {t0:.4f} {time.time():.4f}\n")
        rate = sum(w[2] for w in windows) / sum(w[1] - w[0] for w in windows)
        print(json.dumps({"mode": "burst", "products_per_s_busy": round(rate, 1), "windows": windows}),
              flush=True)
    if log:
        log.close()
