"""Whether NVML's GPM (Hopper's performance monitoring) reports SM utilisation here while a matmul loop runs."""
import ctypes, os, subprocess, sys, time

nvml = ctypes.CDLL("libnvidia-ml.so.1")
class Support(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("isSupportedDevice", ctypes.c_uint)]
class Info(ctypes.Structure):
    _fields_ = [("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p), ("unit", ctypes.c_char_p)]
class Metric(ctypes.Structure):
    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_int), ("value", ctypes.c_double),
                ("metricInfo", Info)]
class Get(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint), ("sample1", ctypes.c_void_p),
                ("sample2", ctypes.c_void_p), ("metrics", Metric * 256)]
print("init", nvml.nvmlInit_v2())
dev = ctypes.c_void_p()
nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev))
sup = Support(1, 0)
print("gpm support rc", nvml.nvmlGpmQueryDeviceSupport(dev, ctypes.byref(sup)), "supported", sup.isSupportedDevice)
s1, s2 = ctypes.c_void_p(), ctypes.c_void_p()
print("alloc", nvml.nvmlGpmSampleAlloc(ctypes.byref(s1)), nvml.nvmlGpmSampleAlloc(ctypes.byref(s2)))
load = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "guard_torch.py"), "matmul",
                         "--seconds", "3", "--warmup", "0"])
for i in range(12):
    if i == 10: load.wait()
    rc1 = nvml.nvmlGpmSampleGet(dev, s1)
    time.sleep(0.1)
    rc2 = nvml.nvmlGpmSampleGet(dev, s2)
    g = Get()
    g.version, g.numMetrics, g.sample1, g.sample2 = 1, 3, s1, s2
    for k, mid in enumerate([1, 2, 3]): g.metrics[k].metricId = mid
    rc = nvml.nvmlGpmMetricsGet(ctypes.byref(g))
    vals = [(g.metrics[k].metricId, g.metrics[k].nvmlReturn, round(g.metrics[k].value, 1)) for k in range(3)]
    print(f"i={i} sample rc={rc1},{rc2} metrics rc={rc} (id, rc, value)={vals}", flush=True)
