"""``rocketstore bench``: the real benchmarks from an installed-like context (run outside the
checkout, so nothing under tools/ is importable), each figure beside a baseline measured in
the same run; the checkout's ``tools/*.py`` still run them."""
from __future__ import annotations

import re
import subprocess
import sys

from servers import REPO


def rate_of(out: str, label: str, unit: str) -> float:
    m = re.search(rf"^{re.escape(label)}\s+([\d.,]+) {unit}", out, re.M)
    assert m, f"no {label!r} row in:\n{out}"
    return float(m.group(1).replace(",", ""))


def consistent(ratio: float, a: float, b: float, step: float) -> bool:
    """``ratio`` (printed to 0.01) is a / b for the printed a and b (rounded to ``step``)."""
    lo = (a - step / 2) / (b + step / 2) - 0.005
    hi = (a + step / 2) / max(b - step / 2, 1e-12) + 0.005
    return lo <= ratio <= hi


def test_rocketstore_bench_quick_outside_the_checkout(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rocketstore", "bench", "--quick"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = proc.stdout
    assert proc.returncode == 0, proc.stderr[-3000:] + out[-3000:]
    sections = re.findall(r"^== (\w+): python -m (rocketstore\.tools\.\w+)", out, re.M)
    assert sections == [("store", "rocketstore.tools.bench_store"),
                        ("broker", "rocketstore.tools.bench_broker"),
                        ("messaging", "rocketstore.tools.bench_messaging")], out
    assert "demo" not in out and "orders consumed" not in out       # not the demo's job
    store, broker, messaging = re.split(r"^== \w+: python -m .*$", out, flags=re.M)[1:]

    # store: the headline against f.write, workloads against f.write and mmap+struct
    assert "(baseline)" in store and "headline" in store
    fw = rate_of(store, "file_write", "M msgs/s")
    ms = rate_of(store, "mmap_struct", "M msgs/s")
    for name in ("put", "put_batch", "get_batch"):
        m = re.search(rf"^{name}\s+([\d.]+) M msgs/s\s+[\d.]+ MB/s\s+([\d.]+)x file_write\s+"
                      rf"([\d.]+)x mmap_struct", store, re.M)
        assert m, f"no {name} row with its ratios in:\n{store}"
        rate, r_fw, r_ms = map(float, m.groups())
        assert rate > 0
        # the ratios are of this run's figures
        assert consistent(r_fw, rate, fw, 0.01) and consistent(r_ms, rate, ms, 0.01), store

    # broker: server processes driven by our client, against a TCP echo measured here
    echo = rate_of(broker, "TCP echo, 1 thread (baseline)", "msgs/s")
    sync1 = rate_of(broker, "rocketstore client, sync 1 thread", "msgs/s")
    m = re.search(r"^rocketstore client, sync 1 thread .* x\s*([\d.]+) vs TCP echo", broker, re.M)
    assert m and echo > 0 and sync1 > 0
    assert consistent(float(m.group(1)), sync1, echo, 1), broker
    assert rate_of(broker, "rocketstore client, batch of 100", "msgs/s") > 0

    # messaging: producer -> broker -> push consumer against the raw store
    m = re.search(r"^e2e batch-32\s+\d+\s+([\d,]+)", messaging, re.M)
    b = re.search(r"^store bodies\s+\d+\s+([\d,]+)", messaging, re.M)
    r = re.search(r"^e2e batch-32\s+([\d.]+)x raw store bodies", messaging, re.M)
    assert m and b and r, messaging
    e2e, bodies = (float(x.group(1).replace(",", "")) for x in (m, b))
    assert e2e > 0 and consistent(float(r.group(1)), e2e, bodies, 1), messaging


def test_unknown_benchmark_is_a_clear_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "rocketstore", "bench", "--quick", "spark"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("rocketstore bench: unknown benchmark 'spark': expected one "
                                   "of store, broker, messaging")


def test_the_checkouts_tools_scripts_still_run_the_benchmarks(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "bench.py"),
                           "--benchmarks=put", "--num=3000", "--no-warm", f"--dir={tmp_path}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^put\s+[\d.]+ M msgs/s .*x file_write", proc.stdout, re.M), proc.stdout
    for tool in ("bench_broker.py", "bench_messaging.py", "bench_scan.py"):
        proc = subprocess.run([sys.executable, str(REPO / "tools" / tool), "--help"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr
