"""The scheduling engine: a pure function from (snapshot, usage, config, logical time) to a cycle record.

Nothing in this package does I/O, reads a clock or draws random numbers. The edges around it (the service
loop, the binder, metrics) live one level up in :mod:`scheduler`.
"""
