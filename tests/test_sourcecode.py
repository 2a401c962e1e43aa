"""Source checks as tests (asyncpg's test__sourcecode, msgspec's test_cpylint)."""
from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "rocketstore" / "store"


def _cython_sources():
    # .pxi: parts of a module's source pulled in with ``include``
    return sorted(list(PKG.glob("*.pyx")) + list(PKG.glob("*.pxd")) + list(PKG.glob("*.pxi")))


def test_cdef_extern_only_in_csrc_pxd():
    offenders = [p.name for p in _cython_sources()
                 if p.name != "_csrc.pxd" and re.search(r"^\s*cdef extern", p.read_text(), re.M)]
    assert offenders == [], f"cdef extern outside _csrc.pxd: {offenders}"


def test_nogil_cdef_functions_declare_their_exception_behaviour():
    # Cython 3 checks for an exception after every call of a nogil function that declares
    # neither, taking the GIL to do it: each must say noexcept or give an exception value
    bad = []
    seen = 0
    sig = re.compile(r"^\s*cdef\s+(?:inline\s+)?[\w\s\*\[\]]+?\(([^)]*)\)\s*([^:]*):", re.M)
    for p in _cython_sources():
        for m in sig.finditer(p.read_text()):
            tail = m.group(2)
            if "nogil" in tail:
                seen += 1
                if "noexcept" not in tail and "except" not in tail:
                    bad.append(f"{p.name}: {m.group(0).strip()}")
    assert seen >= 5, "the signature pattern no longer finds the nogil functions"
    assert bad == []


def test_on_disk_constants_come_from_rs_layout():
    # magic codes appear as numbers only in the C header; Cython modules use the names
    for p in _cython_sources():
        if p.name == "_csrc.pxd":
            continue
        text = p.read_text().upper()
        for magic in ("DAA320A7", "DAA320AB", "CBD43194"):
            assert magic not in text, f"{p.name} hard-codes magic 0x{magic}; use rs_layout.h"


def test_c_layer_makes_no_python_calls():
    for p in (ROOT / "csrc").glob("*.[ch]"):
        assert not re.search(r'#\s*include\s*[<"]Python\.h', p.read_text()), \
            f"{p.name} includes Python.h"


def test_import_without_a_build_says_how_to_build(tmp_path):
    # a copy of the package without its compiled modules, as a fresh checkout is; -S keeps
    # an editable install of the real package (a site-packages finder) out of the way
    for src in (ROOT / "rocketstore", PKG):
        pkg = tmp_path / src.relative_to(ROOT)
        pkg.mkdir()
        for f in src.glob("*.py"):
            (pkg / f.name).write_text(f.read_text())
    proc = subprocess.run([sys.executable, "-S", "-c", "import rocketstore"], cwd=tmp_path,
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "pip install -e ." in proc.stderr
    assert "not built" in proc.stderr


COMPILED = sorted(f"rocketstore.store.{p.stem}" for p in PKG.glob("_*.pyx"))


def test_every_compiled_module_has_a_stub():
    missing = [m for m in COMPILED if not (PKG / (m.rsplit(".", 1)[1] + ".pyi")).exists()]
    assert missing == []


def test_stubs_match_the_compiled_modules():
    # the .pyi files are the type hints of the compiled public API: keep them honest
    proc = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", *COMPILED, "--allowlist", str(ROOT / "tests" / "stubtest_allowlist.txt")],
        cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_sdist_ships_every_included_source():
    # a .pxi pulled in with ``include`` is part of its module's source: an sdist without it
    # cannot build (MANIFEST.in decides what the sdist holds)
    manifest = (ROOT / "MANIFEST.in").read_text().splitlines()
    patterns = [pat for line in manifest if line.startswith("recursive-include rocketstore ")
                for pat in line.split()[2:]]
    included = [PKG / name for pyx in PKG.glob("*.pyx")
                for name in re.findall(r'^include "([^"]+)"', pyx.read_text(), re.M)]
    assert included, "no include found: the pattern no longer matches"
    for path in included:
        assert path.exists(), f"{path.name} is included but missing"
        assert any(fnmatch.fnmatch(path.name, pat) for pat in patterns), \
            f"{path.name} is not shipped in the sdist (MANIFEST.in)"
