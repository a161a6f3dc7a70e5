"""Deployment: writing TorchScript, ONNX, OpenVINO and TensorRT exports, their metadata, INT8 quantization and the
backends that run them."""
