"""One rank's process (rank.py) and its phases: collectives, bandwidth, MNIST/DDP, its own
phase deadline (workerwatch.py), its config and the test-only fault hooks."""
