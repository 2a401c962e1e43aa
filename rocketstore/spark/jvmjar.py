"""The JVM batch reader (``format("rocketstore-jvm")``): its jar, built on first use.

The Java sources ship in ``rocketstore/spark/jvm/``; ``jvm_jar()`` compiles them with the
machine's ``javac`` against the installed pyspark's jars, once, into a cache directory
keyed by the sources' hash and the Spark version (``$ROCKETSTORE_CACHE``, else
``~/.cache/rocketstore``). ``configure(builder)`` puts the jar on a session builder.

The JVM reader has its own short name: a Python data source registered as ``rocketstore``
stays what ``format("rocketstore")`` means (streaming, writes and the wire read), and a batch
read asks for ``format("rocketstore-jvm")`` explicitly.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from rocketstore.errors import JvmBuildError

#: The JVM reader's format name (its DataSourceRegister short name).
FORMAT = "rocketstore-jvm"
SOURCE_CLASS = "rocketstore.spark.RocketStoreSource"
SOURCES = Path(__file__).with_name("jvm")
_SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"


def cache_dir() -> Path:
    """Where built jars are kept: ``$ROCKETSTORE_CACHE`` or ``~/.cache/rocketstore``."""
    root = os.environ.get("ROCKETSTORE_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "rocketstore")
    return Path(root) / "spark-jvm"


def _spark() -> tuple[str, Path]:
    try:
        import pyspark
    except ImportError:
        raise JvmBuildError("the rocketstore-jvm reader needs pyspark (pip install "
                            "rocketstore[spark])") from None
    jars = Path(pyspark.__file__).parent / "jars"
    if not jars.is_dir():
        raise JvmBuildError(f"pyspark has no jars directory ({jars}) to compile against")
    return pyspark.__version__, jars


def jvm_jar() -> str:
    """The path of the JVM reader's jar for the installed pyspark, compiled on first call.

    Raises ``JvmBuildError`` when there is no ``javac`` (set ``JAVA_HOME`` or put a JDK 17+
    on ``PATH``) or the compile fails; the Python source (``format("rocketstore")``) works
    without it."""
    version, jars = _spark()
    sources = sorted(SOURCES.glob("*.java"))
    h = hashlib.sha256(version.encode())
    for f in sources:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    target = cache_dir() / f"rocketstore-spark-jvm-{version}-{h.hexdigest()[:16]}.jar"
    if target.is_file():
        return str(target)
    home = os.environ.get("JAVA_HOME")
    javac = (shutil.which("javac", path=os.path.join(home, "bin")) if home else None) \
        or shutil.which("javac")
    if javac is None:
        raise JvmBuildError("no javac found (set JAVA_HOME or put a JDK 17+ on PATH) to build "
                            "the rocketstore-jvm reader; format('rocketstore') needs none")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        classes = os.path.join(tmp, "classes")
        cmd = [javac, "--release", "17", "-nowarn", "-d", classes,
               "-cp", str(jars / "*"), *map(str, sources)]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise JvmBuildError(f"javac failed building the rocketstore-jvm reader:\n{run.stderr}")
        part = os.path.join(tmp, "out.jar")
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
            z.writestr(_SERVICE, SOURCE_CLASS + "\n")
            for dirpath, _, files in os.walk(classes):
                for name in sorted(files):
                    full = os.path.join(dirpath, name)
                    z.write(full, os.path.relpath(full, classes))
        os.replace(part, target)     # atomic: a concurrent build loses nothing
    return str(target)


def configure(builder: Any) -> Any:
    """``builder`` (a ``SparkSession.Builder``) with the JVM reader's jar on ``spark.jars``
    (added to any jars already set there); returns the builder."""
    jar = jvm_jar()
    current = builder._options.get("spark.jars") if hasattr(builder, "_options") else None
    return builder.config("spark.jars", f"{current},{jar}" if current else jar)


def session_builder() -> Any:
    """``SparkSession.builder`` with the JVM reader on it (see ``configure``)."""
    from pyspark.sql import SparkSession
    return configure(SparkSession.builder)
