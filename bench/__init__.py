"""Benchmarks, by subject: ``engine/``, ``structured/``, ``serving/``, ``gateway/``, ``policies/``,
``filters/``, ``audit/``, ``keys/``. Not shipped in the wheel: they run from a source checkout.

``python -m bench.gpu_engine`` and ``bench/serve_gpu.sh`` stay at this level, the entry points
device runs and documents call; ``cli.py`` is ``strongroom bench``; ``provenance.py`` stamps
every result. Figures: ``BENCHMARKS.md``; the latest result of each: ``results/``.
"""
