"""Model weights: bounded checkpoint reading (no code runs) and loading into our models."""
