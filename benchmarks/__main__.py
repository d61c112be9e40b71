"""``python -m benchmarks``: run the benchmark suite (see :mod:`benchmarks.run`)."""

from .run import main

main()
