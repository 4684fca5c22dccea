"""The node agent's phases, one module each; every module's ``run`` is its one entry point and
node.py's ``PHASES`` lists them in order (docs/design.md#phases)."""
