"""guard_report.py over synthetic logs of known shares (no GPU): python3 bench/gpu/guard_report_test.py

Each scenario's processes are written as guard_on_gpu.sh --second writes them (a log of batches, stderr, the
sampler's card and per-process sample files, the plan), with shares chosen here; the report must find them,
judge them by NVML time, and give no share to a process whose guard stepped aside.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ALONE = 600.0  # products per second, alone
PERIOD = 0.2  # NVML's sample period, s
T0 = 1_800_000_000.0


class Run:
    def __init__(self, work):
        self.work, self.plan = work, []

    def write(self, name, text):
        with open(os.path.join(self.work, name), "w") as f:
            f.write(text)

    def scenario(self, name, policy, procs, seconds=4.5, overhead=1.0, stepped_aside=()):
        """procs: (asked share, time share, pid); each process's throughput is its time share of the alone
        rate times `overhead` (what time-slicing leaves)."""
        entries, samples = [], []
        for i, (asked, time_share, pid) in enumerate(procs):
            log = [f"# pid {pid}"]
            rate = ALONE * time_share / 100 * overhead
            done, t = 0, T0
            while t < T0 + seconds:
                t += 2 / rate
                done += 2
                log.append(f"{t:.4f} {done} {2000 / ALONE:.3f} 0")
            self.write(f"{name}-{i}.log", "\n".join(log) + "\n")
            if asked == "-":
                err = ""
            elif i in stepped_aside:
                err = "mgpu-guard pid=1: MGPU_CONTAINER_TOKEN is missing or not a token of letters, digits, '-' " \
                      "and '_', so the guard steps aside\n"
            else:
                err = f"mgpu-guard pid={pid}: guarding 1 card(s) for container token={name}-{i}: cap 16384 MiB\n"
            self.write(f"{name}-{i}.err", err)
            entries.append({"share": asked, "qos": "online", "delay": 0, "stop": "", "log": f"{name}-{i}.log",
                            "err": f"{name}-{i}.err"})
            stamp = T0
            while stamp < T0 + seconds + PERIOD:
                samples.append((int(stamp * 1e6), pid, round(time_share)))
                stamp += PERIOD
        samples.sort()
        self.write(f"{name}.samples", "".join(f"{s} {p} {u}\n" for s, p, u in samples))
        busy = min(100, sum(p[1] for p in procs))
        self.write(f"{name}.util", "".join(f"{T0 + k / 10:.3f} {busy} 1980 600\n" for k in range(int(seconds * 10))))
        self.plan.append({"name": name, "kind": "share", "policy": policy, "t0": T0, "seconds": 4, "procs": entries,
                          "util": f"{name}.util", "samples": f"{name}.samples"})

    def finish(self):
        self.write("scenarios.jsonl", "".join(json.dumps(s) + "\n" for s in self.plan))
        self.write("status.txt", "part alone: rc=0 in 10 s\n")
        out = os.path.join(self.work, "out")
        subprocess.run([sys.executable, os.path.join(HERE, "guard_report.py"), self.work, out], check=True)
        with open(os.path.join(out, "results.json")) as f:
            results = json.load(f)
        with open(os.path.join(out, "summary.txt")) as f:
            return results, f.read()


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.run = Run(self.dir.name)
        self.run.scenario("alone", "none", [("-", 99, 100)])

    def tearDown(self):
        self.dir.cleanup()

    def test_time_shares_are_judged_and_throughput_is_beside_them(self):
        # A pair on a saturated card loses 7 percent of its throughput to switching: thr 27.9 for a time of 30.
        self.run.scenario("fixed-30+70", "fixed-share", [("30", 30, 101), ("70", 70, 102)], overhead=0.93)
        self.run.scenario("fixed-30", "fixed-share", [("30", 35, 103)])
        results, summary = self.run.finish()
        pair = results["fixed-30+70"]
        self.assertEqual([p["time"] for p in pair["procs"]], [30.0, 70.0])
        self.assertAlmostEqual(pair["procs"][0]["thr"], 30 * 0.93 / 0.99, delta=0.5)
        self.assertAlmostEqual(pair["procs"][0]["split"], 30, delta=0.3)
        self.assertEqual(pair["sample_period_ms"], 200.0)
        # The window runs from 0.5 s after the last process's first batch to the first one's last: 4 s, 20 or
        # 21 stamps of 5 points each.
        self.assertIn(pair["samples_in_window"], (20, 21))
        self.assertAlmostEqual(pair["points_per_sample"], 5.0, delta=0.1)
        self.assertLessEqual(abs(pair["idle_by_time"]), 0.5)
        self.assertEqual(results["fixed-30"]["procs"][0]["time"], 35.0)
        self.assertEqual(results["misses"], ["fixed-30 30->35.0"])
        self.assertEqual(results["judged_shares"], 3)
        self.assertIn("30->30.0/", summary)

    def test_a_process_the_guard_stepped_aside_for_gets_no_share(self):
        self.run.scenario("fixed-10+90", "fixed-share", [("10", 46, 104), ("90", 46, 105)], stepped_aside=(0, 1))
        results, summary = self.run.finish()
        self.assertEqual([p["guarded"] for p in results["fixed-10+90"]["procs"]], [False, False])
        self.assertEqual(results["judged_shares"], 0)
        self.assertIn("10->UNGUARDED 90->UNGUARDED", summary)
        self.assertIn("NOT GUARDED, so no share reported: 2 processes of fixed-10+90", summary)
        self.assertIn("so the guard steps aside", summary)

    def test_an_idle_card_at_shares_that_add_up_to_100_is_a_miss(self):
        self.run.scenario("guaranteed-30+70", "guaranteed-burst-share", [("30", 29, 106), ("70", 66, 107)])
        results, _ = self.run.finish()
        self.assertAlmostEqual(results["guaranteed-30+70"]["idle_by_time"], 5.0, delta=0.5)
        self.assertIn("guaranteed-30+70 idle 5.0", results["misses"])


if __name__ == "__main__":
    unittest.main()
