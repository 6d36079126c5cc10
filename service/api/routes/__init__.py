"""HTTP routes, one module per tag."""
