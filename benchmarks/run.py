"""Runs the scatterx benchmark from a checkout: the same as ``scatterx bench`` (same options).

    python benchmarks/run.py --quick
    python benchmarks/run.py --json bench.json --plot bench.png

The cases and the registry of implementations live in the package (``scatterx._bench_cases``,
``scatterx._bench_peers``) so that an installed scatterx can run them too.
"""

import sys

from scatterx._bench import main

if __name__ == "__main__":
    sys.exit(main())
