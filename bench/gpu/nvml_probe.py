"""What NVML reports about SM utilisation, per process and for the card, while a load runs: the samples the
guard's compute share is charged from (bench/RESULTS.md, section 4).

  python3 bench/gpu/nvml_probe.py [command...]   (no command: a 4 s matmul loop of guard_torch.py)
PROBE_STEPS: how many 0.2 s steps to sample (default 20).
"""
import ctypes
import os
import subprocess
import sys
import time

nvml = ctypes.CDLL("libnvidia-ml.so.1")


class Sample(ctypes.Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class Rates(ctypes.Structure):  # nvmlUtilization_t
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


print("init", nvml.nvmlInit_v2())
dev = ctypes.c_void_p()
print("handle", nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)))
command = sys.argv[1:] or [sys.executable, os.path.join(os.path.dirname(__file__), "guard_torch.py"), "matmul",
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
