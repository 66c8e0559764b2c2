"""QuorumBench: a community-run, tamper-evident leaderboard for open LLMs.

This release holds the evaluation engine that every runner executes.
"""

from quorumbench.errors import QuorumError

__version__ = "0.1.0"

__all__ = ["QuorumError", "__version__"]
