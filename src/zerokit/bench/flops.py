"""Model FLOPs utilisation: the FLOPs a step's tokens need, against the devices' peak.

Training a decoder costs about 6 FLOPs per parameter per token (2 forward, 4 backward); attention's
own term (12 * layers * hidden * sequence) is left out, as in the usual MFU, which slightly
understates it at long sequences. Peaks are dense (no sparsity) bf16/fp16 tensor-core figures
from the vendors' data sheets; give `--peak-tflops` for a device not listed or another precision.
"""

from __future__ import annotations

# Substring of torch.cuda.get_device_name() -> dense bf16/fp16 TFLOPS per device; first match wins.
PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),
    ("GH200", 989.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("V100", 125.0),
)


def peak_tflops(device_name: str) -> float | None:
    return next((tflops for key, tflops in PEAK_TFLOPS if key in device_name), None)


def model_flops_per_token(parameters: int) -> float:
    return 6.0 * parameters


def mfu(tokens_per_second: float, parameters: int, devices: int, peak_tflops_per_device: float) -> float:
    """Achieved model FLOPs over the peak of all devices, a fraction in [0, 1] for a sane run."""
    return tokens_per_second * model_flops_per_token(parameters) / (devices * peak_tflops_per_device * 1e12)
