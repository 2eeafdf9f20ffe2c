"""toolwire's benchmarks: ``python -m benchmarks`` or ``nox -s bench``.

Each module exposes ``run(quick: bool = False) -> list[dict]``; every row holds
``benchmark``, ``case``, ``median_ms``, ``min_ms``, ``max_ms`` and ``runs`` plus
its own figures. Comparisons are ratios measured in the same run, because this
machine is shared and absolute times drift.
"""
