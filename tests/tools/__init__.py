"""CLI tests."""

#: an endpoint spec as ``register`` reads it from a file
SPEC = {
    "type": "Endpoint",
    "namespace": "ns",
    "component": "backend",
    "endpoint": "generate",
    "transport": {"tcp": "x"},
}
