"""Isolation rounds of `check`: which node, which link (docs/design.md#isolation).

``scheduler`` decides the groups of each round from the tests so far (pure); ``simulate`` runs it
against a model of faulty nodes and links (bench/isolate.py, the property tests); ``rounds`` runs
the rounds through the master's store (its reads and waits in ``storeio``), each member's part in
``grouptest``, what members wrote read back by ``results`` (and when a group has stalled), each
node's link budget from its Facts in ``budget``; ``answer`` puts the findings and the section in
the master's report.
"""
