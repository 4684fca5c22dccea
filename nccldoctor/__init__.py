"""nccldoctor: diagnose multi-node NCCL and PyTorch DDP."""

__version__ = "0.1.0"
