"""Pure domain logic: no I/O, no clock, no randomness, no environment.

Everything here is a plain function over plain values, so the server, the runner
and ``quorumbench verify`` compute exactly the same thing.
"""
