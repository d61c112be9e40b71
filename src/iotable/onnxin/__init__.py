"""The QONNX front end: a quantized model given as an ONNX file (or ``onnx.ModelProto``) as a table network.

``read`` parses the file as untrusted data (its size, every tensor's size, every attribute, before any
work); ``quant`` holds QONNX's quantizer semantics (rounding modes, ``signed``, ``narrow``) evaluated exactly;
``layers`` cuts the graph at its quantizers into table layers and computes each unit's table in float64;
``network`` assembles the :class:`~iotable.network.TableNetwork`; ``check`` compares it with qonnx's own
executor. :func:`iotable.precompute` and :func:`iotable.verify` reach it through the file front ends the
network registers (:mod:`iotable.network.frontends`).
"""

from __future__ import annotations

from ..network.frontends import FileFrontEnd, register_file_front_end
from .check import verify_onnx
from .network import is_onnx_model, precompute_onnx

register_file_front_end(FileFrontEnd("onnx", is_onnx_model, precompute_onnx, verify_onnx))

__all__ = ["precompute_onnx", "verify_onnx"]
