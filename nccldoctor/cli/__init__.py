"""The command line: one module per command, each a thin shell over the library."""
