"""The README's produce/consume example over TCP runs as written against real servers."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from servers import start_broker, start_namesrv  # noqa: E402  (tests/servers.py)

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_tcp_example(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    example = next(b for b in blocks if 'namesrv_addr="127.0.0.1:9876"' in b)
    ns = start_namesrv(tmp_path)
    broker = start_broker(tmp_path / "store", ns.addr)
    try:
        script = example.replace("127.0.0.1:9876", ns.addr)
        # the example leaves its consumer running; give it time to print, then stop it
        script += "\nimport time\ntime.sleep(3)\nc.shutdown()\n"
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=120, env=dict(os.environ))
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "MessageExt" in proc.stdout and "Orders" in proc.stdout, proc.stdout
    finally:
        assert broker.stop() == 0
        assert ns.stop() == 0
