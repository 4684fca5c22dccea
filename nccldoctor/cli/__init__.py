"""The command line: one module per command, each a thin shell over the library."""

# One sentence in every command's --help; the codes are report.document's EXIT_*.
EXIT_CODES = (
    "Exit codes: 0 healthy (warnings included), 1 problems found (for check: a faulty node or "
    "link the isolation rounds named among them), 2 usage error, 3 the run could not complete "
    "(check could not run, or a node's report is missing). Every node of check exits with the "
    "cluster's verdict, as its JSON says (exit_code; exit_decided_by: findings or cluster). "
    "watch passes the job's own exit code through, and exits 3 when it ended a hung job."
)
