"""Import-test of an installed rocketstore, run from outside the source tree by .ci/run.

Checks that the package imported is the installed one (not the checkout), that it has every
subpackage of the checkout, that every compiled module loads, and that a store round-trips a message. With ``--editable`` it also
checks what only the README's editable install promises: mypy finds the package, and Spark
finds the ``rocketstore`` format with no register call.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
editable = "--editable" in sys.argv

import rocketstore  # noqa: E402
from rocketstore import Message, MessageStore, StoreConfig  # noqa: E402

where = os.path.dirname(os.path.abspath(rocketstore.__file__))
if editable:
    assert where == os.path.join(REPO, "rocketstore"), where
else:
    assert not where.startswith(REPO + os.sep), f"imported the checkout, not the install: {where}"
# every subpackage of the source tree is in the install (a name missing from pyproject's
# packages list installs without it: rocketstore.aio did)
for dirpath, dirnames, filenames in os.walk(os.path.join(REPO, "rocketstore")):
    dirnames[:] = [d for d in dirnames if not d.startswith((".", "_"))]
    if "__init__.py" in filenames:
        sub = os.path.relpath(dirpath, REPO).replace(os.sep, ".")
        spec = importlib.util.find_spec(sub)
        assert spec is not None and spec.origin.startswith(where), (sub, spec)
        try:
            importlib.import_module(sub)
        except ModuleNotFoundError as e:        # an optional extra (pyspark) is not installed
            assert e.name and not e.name.startswith("rocketstore"), (sub, e)
for name in ("_mapped", "_codec", "_commitlog", "_scan", "_consumequeue", "_dispatch",
             "_reader", "_indexfile", "_verify", "_columns"):
    mod = importlib.import_module(f"rocketstore.store.{name}")
    assert mod.__file__.endswith(".so"), mod.__file__

root = tempfile.mkdtemp(prefix="rocketstore-smoke-")
cfg = StoreConfig(mapped_file_size_commit_log=1 << 20, mapped_file_size_consume_queue=2000,
                  max_hash_slot_num=100, max_index_num=400)
with MessageStore.open(root, cfg) as store:
    r = store.put_message(Message("Smoke", b"hello", keys=["k"]))
    assert r.ok and store.wait_dispatched(10)
    assert store.get_message("g", "Smoke", 0, 0).messages[0].body_bytes == b"hello"
print(f"smoke: rocketstore {rocketstore.__version__} from {where}: OK")

if editable:
    # a type checker run from elsewhere resolves the package through the editable install
    probe = os.path.join(root, "probe.py")
    with open(probe, "w") as f:
        f.write("from rocketstore import MessageStore\n"
                "reveal_type(MessageStore.open)\n")
    out = subprocess.run([sys.executable, "-m", "mypy", "--python-executable", sys.executable,
                          "--no-incremental", probe], cwd=root, capture_output=True, text=True)
    assert "import-not-found" not in out.stdout and "MessageStore" in out.stdout, out.stdout
    print("smoke: mypy resolves rocketstore under the editable install: OK")

    # Spark's lookup of pyspark_* modules finds the format: no register call
    os.environ.pop("PYTHONPATH", None)
    os.environ.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                      SPARK_LOCAL_IP="127.0.0.1")
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .getOrCreate())
    try:
        rows = spark.read.format("rocketstore").load(root).select("topic", "body").collect()
        assert [(row.topic, bytes(row.body)) for row in rows] == [("Smoke", b"hello")], rows
    finally:
        spark.stop()
    print("smoke: spark.read.format('rocketstore') without register(): OK")
