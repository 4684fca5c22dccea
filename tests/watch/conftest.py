from tests.cluster.conftest import lab  # noqa: F401  (the network-namespace hosts fixture)
