"""The node agent (node.py) and what it runs per phase: reach, the master's listener,
rendezvous, the TCP probe, the worker launcher and monitor, gather."""
