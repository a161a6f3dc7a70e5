"""The networks: layers, blocks, heads, the model built from a YAML and the YAML checks."""
