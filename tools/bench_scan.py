#!/usr/bin/env python3
"""`python tools/bench_scan.py [options]`: runs rocketstore.tools.bench_scan from this checkout.

The benchmark lives in the package so an installed rocketstore has it (`rocketstore bench`,
`python -m rocketstore.tools.bench_scan`); see that module for what it measures and its options.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rocketstore.tools.bench_scan import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
