"""The node agent (node.py runs the phase table), its phases (phases/, one module each) and what
they use: reach, the gate (the master's listener), rendezvous, the TCP probe, the worker launcher,
the watchdog (the agent's monitor of its workers), gather."""
