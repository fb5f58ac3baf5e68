"""NVML on a real GPU, for bench/gpu/guard_on_gpu.sh and bench/RESULTS.md section 4 (no PyTorch needed).

  python3 bench/gpu/nvml_probe.py samples [command...]
      what NVML reports of SM utilisation, per process and for the card, while a load runs (no command: a 4 s
      matmul loop of guard_torch.py): the samples the guard's compute share is charged from.
      PROBE_STEPS: how many 0.2 s steps to sample (default 20).
  python3 bench/gpu/nvml_probe.py card --seconds S --log FILE [--samples FILE]
      the card every 0.1 s: "<wall time> <gpu percent> <SM clock MHz> <power W>" lines (GPU-Util is
      nvmlDeviceGetUtilizationRates); with --samples, also every per-process utilisation sample NVML gives
      (nvmlDeviceGetProcessUtilization, what the guard charges): "<stamp us> <pid> <sm percent>" lines. Run
      outside the guard, it sees every process of the card.
  python3 bench/gpu/nvml_probe.py slice
      what NVML answers this process of card 0: memory (v1 and v2), compute processes (v3 and v1),
      utilisation, as one JSON line (under the guard: the container's slice).
"""
import ctypes
import json
import os
import subprocess
import sys
import time

nvml = ctypes.CDLL("libnvidia-ml.so.1")
MiB = 1 << 20


class Sample(ctypes.Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class Rates(ctypes.Structure):  # nvmlUtilization_t
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class Mem(ctypes.Structure):  # nvmlMemory_t
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Mem2(ctypes.Structure):  # nvmlMemory_v2_t
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong), ("reserved", ctypes.c_ulonglong),
                ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Proc1(ctypes.Structure):  # nvmlProcessInfo_v1_t
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class Proc(ctypes.Structure):  # nvmlProcessInfo_t (v2, v3)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


def device():
    nvml.nvmlInit_v2()
    dev = ctypes.c_void_p()
    nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
    return dev


def slice_view(dev):
    """What NVML answers this process of `dev`, as a dict (guard_torch.py's nvml mode reads it too)."""
    out = {"pid": os.getpid()}
    m = Mem()
    rc = nvml.nvmlDeviceGetMemoryInfo(dev, ctypes.byref(m))
    out["memory_v1"] = {"rc": rc, "total_mib": m.total // MiB, "used_mib": m.used // MiB, "free_mib": m.free // MiB}
    m2 = Mem2()
    m2.version = ctypes.sizeof(Mem2) | (2 << 24)
    rc = nvml.nvmlDeviceGetMemoryInfo_v2(dev, ctypes.byref(m2))
    out["memory_v2"] = {"rc": rc, "total_mib": m2.total // MiB, "used_mib": m2.used // MiB,
                        "free_mib": m2.free // MiB, "reserved_mib": m2.reserved // MiB}
    for name, cls, fn in [("processes_v3", Proc, "nvmlDeviceGetComputeRunningProcesses_v3"),
                          ("processes_v1", Proc1, "nvmlDeviceGetComputeRunningProcesses")]:
        buf = (cls * 64)()
        n = ctypes.c_uint(64)
        rc = getattr(nvml, fn)(dev, ctypes.byref(n), buf)
        out[name] = {"rc": rc, "list": [[buf[i].pid, buf[i].usedGpuMemory // MiB] for i in range(min(n.value, 64))]
                     if rc == 0 else []}
    r = Rates()
    out["utilization"] = {"rc": nvml.nvmlDeviceGetUtilizationRates(dev, ctypes.byref(r)), "gpu": r.gpu}
    return out


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "samples"
    dev = device()
    if mode == "card":
        seconds = float(sys.argv[sys.argv.index("--seconds") + 1])
        log = open(sys.argv[sys.argv.index("--log") + 1], "w")
        samples = open(sys.argv[sys.argv.index("--samples") + 1], "w") if "--samples" in sys.argv else None
        last = int(time.time() * 1e6)  # only samples newer than now, as the guard reads them
        end = time.time() + seconds
        while time.time() < end:
            r = Rates()
            mhz, mw = ctypes.c_uint(0), ctypes.c_uint(0)
            nvml.nvmlDeviceGetClockInfo(dev, 1, ctypes.byref(mhz))  # NVML_CLOCK_SM
            nvml.nvmlDeviceGetPowerUsage(dev, ctypes.byref(mw))
            if nvml.nvmlDeviceGetUtilizationRates(dev, ctypes.byref(r)) == 0:
                log.write(f"{time.time():.3f} {r.gpu} {mhz.value} {mw.value / 1000:.0f}\n")
                log.flush()
            if samples:
                buf = (Sample * 1024)()
                n = ctypes.c_uint(1024)
                if nvml.nvmlDeviceGetProcessUtilization(dev, buf, ctypes.byref(n), ctypes.c_ulonglong(last)) == 0:
                    got = [buf[k] for k in range(min(n.value, 1024))]
                    for g in sorted(got, key=lambda g: g.timeStamp):
                        samples.write(f"{g.timeStamp} {g.pid} {g.smUtil}\n")
                    if got:
                        last = max(g.timeStamp for g in got)
                    samples.flush()
            time.sleep(0.1)
    elif mode == "slice":
        print(json.dumps(slice_view(dev)), flush=True)
    else:
        command = sys.argv[2:] or [sys.executable, os.path.join(os.path.dirname(__file__), "guard_torch.py"), "matmul",
                                   "--seconds", "4", "--warmup", "0"]
        load = subprocess.Popen(command)
        last = int(time.time() * 1e6)  # only samples newer than now, as the guard reads them
        for i in range(int(os.environ.get("PROBE_STEPS", "20"))):
            time.sleep(0.2)
            buf = (Sample * 512)()
            n = ctypes.c_uint(512)
            rc = nvml.nvmlDeviceGetProcessUtilization(dev, buf, ctypes.byref(n), ctypes.c_ulonglong(last))
            got = [(buf[k].pid, buf[k].timeStamp, buf[k].smUtil) for k in range(min(n.value, 512))] if rc == 0 else []
            if got:
                last = max(t for _, t, _ in got)
            rates = Rates()
            rr = nvml.nvmlDeviceGetUtilizationRates(dev, ctypes.byref(rates))
            print(f"t={i * 0.2:.1f} process rc={rc} new={len(got)} (pid, sm)={[(p, u) for p, _, u in got][:6]} "
                  f"| card rc={rr} gpu={rates.gpu}", flush=True)
        load.wait()


if __name__ == "__main__":
    main()
