"""Rules over NCCL RAS output (scope ``ras``): what ``ncclras`` reports of the job's processes
and communicators (``status.py``: dead processes, communicators missing ranks, ranks that
disagree, errors, timeouts), and what NCCL 2.31+'s diagnostics reports (``NCCL DIAG``) flag
(``diag.py``, a table: uncorrected ECC errors, inactive NVLinks, GPUs, drivers or ``NCCL_*``
variables that differ across a communicator's ranks, GPU pairs whose P2P transfer failed,
reports that could not gather every rank; 2.32's Xid/SXid events, IOMMU remapping or split
groups and ATS off on the GPU/NIC pairs GPUDirect uses, ``rdma_topo`` failures, disconnected
paths, NICs down or unlike across nodes, ``ib_write_bw`` results off the median or under half
the port rate).
"""

from checks.ras import diag_rules, status

__all__ = ["diag_rules", "status"]
