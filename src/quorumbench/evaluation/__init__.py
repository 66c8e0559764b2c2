"""The evaluation engine and the plugin SDK (benchmarks and model backends).

It knows nothing of the server: the runner and ``quorumbench eval`` both call it.
"""
