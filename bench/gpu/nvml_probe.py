"""What NVML reports about utilisation on this machine while a matmul loop runs (bench/gpu/guard_on_gpu.sh)."""
import ctypes, os, subprocess, sys, time

nvml = ctypes.CDLL("libnvidia-ml.so.1")
class Sample(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]
class Rates(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]
print("init", nvml.nvmlInit_v2())
dev = ctypes.c_void_p()
print("handle", nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)))
load = subprocess.Popen(sys.argv[1:] if os.environ.get("PROBE_COMMAND") else sys.argv[1:] + [
    sys.executable, os.path.join(os.path.dirname(__file__), "guard_torch.py"), "matmul", "--seconds", "4", "--warmup", "0"])
print("load pid", load.pid)
last = int(time.time() * 1e6)
for i in range(int(os.environ.get('PROBE_STEPS', '20'))):
    time.sleep(0.2)
    buf = (Sample * 512)()
    n = ctypes.c_uint(512)
    rc = nvml.nvmlDeviceGetProcessUtilization(dev, buf, ctypes.byref(n), ctypes.c_ulonglong(last))
    got = [(buf[k].pid, buf[k].timeStamp, buf[k].smUtil) for k in range(min(n.value, 512))] if rc == 0 else []
    if got: last = max(t for _, t, _ in got)
    r = Rates()
    rr = nvml.nvmlDeviceGetUtilizationRates(dev, ctypes.byref(r))
    print(f"t={i*0.2:.1f} process rc={rc} n={n.value} samples={[(g[0], g[2]) for g in got][:6]} new={len(got)} | rates rc={rr} gpu={r.gpu}", flush=True)
load.wait()
smi = subprocess.run(['nvidia-smi', '--query-gpu=utilization.gpu', '--format=csv'], capture_output=True, text=True)
print(smi.stdout)
