"""The Python API: Detector, its Results, ensembles and test-time augmentation."""
