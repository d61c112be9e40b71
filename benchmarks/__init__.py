"""Benchmarks of iotable's table generation, runtime and memory against baselines (not part of the package).

Run from the repository root: ``python -m benchmarks [--quick] [--json PATH] [--only NAME ...]``; see
``benchmarks/README.md``. :mod:`benchmarks.workloads` builds the models, :mod:`benchmarks.baselines` holds
the algorithms iotable is compared with, :mod:`benchmarks.run` measures and reports. Single-purpose suites run on
their own (``python -m benchmarks.NAME``): ``structure``, ``hdl``, ``implement``, ``qonnx``, ``headline``, ``arith``
and ``cluster`` (the heavy stages on 1 and 2 dask workers, projected to 64).
"""
