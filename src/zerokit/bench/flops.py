"""Model FLOPs utilisation: the FLOPs a step's tokens need, against the devices' peak at the run's precision.

FLOPs per token of training a decoder (PaLM, appendix B; Chinchilla's count without the embedding lookup):

    6 * N  +  12 * L * d * S

6 FLOPs per parameter per token (2 in the forward matmuls, 4 in the backward), and attention's own matmuls
(QK^T and AV: 2 * 2 * S * d per layer and token forward, times 3 for forward and backward), which have no
parameters. N counts every parameter once (a tied head is the output matmul's weight), L is the number of
layers, d the hidden size, S the sequence length. Causal masking is not credited (as in PaLM and llm.c): the
kernels that skip the masked half do less work than counted. Leaving the attention term out understates MFU:
by 8% at GPT-2 124M's shape with S 512, 15% at 1024, 30% at 2048.

Peaks are the vendors' dense figures (no 2:4 sparsity) by device *and* precision: a bf16 run is measured
against bf16's peak, an fp32 run (TF32 off, torch's default for matmuls) against fp32's. `--peak-tflops`
overrides the table for a device or precision not listed.
"""

from __future__ import annotations

PRECISIONS = ("bf16", "fp16", "tf32", "fp32")

# Substring of torch.cuda.get_device_name() -> dense TFLOPS per device by precision; the first match wins, so
# the longer names come first ("GH200" before "H200", "L40S" and "L40" before "L4"). None: no such tensor math.
# Sources, NVIDIA data sheets: H100 (SXM, PCIe, NVL; 2023), H200 (SXM, NVL; 2024), HGX B200 (2024), A100 (2021),
# L40S, L40, L4 (2023), V100 (2020); the data sheets give sparse figures for tensor math: halved here.
PEAK_TFLOPS: tuple[tuple[str, dict[str, float | None]], ...] = (
    ("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.2}),
    ("H100 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("H200 NVL", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("GH200", {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}),
    ("H200", {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}),  # SXM
    ("H100", {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}),  # SXM ("H100 80GB HBM3")
    ("B200", {"bf16": 2250.0, "fp16": 2250.0, "tf32": 1100.0, "fp32": 75.0}),
    ("A100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6}),
    ("L40", {"bf16": 181.0, "fp16": 181.0, "tf32": 90.5, "fp32": 90.5}),
    ("L4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("V100", {"bf16": None, "fp16": 125.0, "tf32": None, "fp32": 15.7}),
)


def peak_tflops(device_name: str, precision: str = "bf16") -> float | None:
    """The device's dense peak at that precision; None for a device not in the table (or without such math)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {PRECISIONS}")
    return next((peaks[precision] for key, peaks in PEAK_TFLOPS if key in device_name), None)


def precision_of(train_args: list[str] | tuple[str, ...]) -> str:
    """The matmul precision of a run from its TrainingArguments flags: --bf16/--fp16 true, --tf32 true, else fp32."""

    def on(flag: str) -> bool:
        if flag in train_args:
            i = train_args.index(flag)
            return i + 1 >= len(train_args) or train_args[i + 1].lower() not in ("false", "0", "no")
        return any(arg.lower() in (f"{flag}=true", f"{flag}=1", f"{flag}=yes") for arg in train_args)

    return next((p for p in ("bf16", "fp16", "tf32") if on(f"--{p}")), "fp32")


def flops_per_token(parameters: int, layers: int, hidden: int, sequence: int) -> float:
    """6N + 12·L·d·S: the parameters' matmuls and attention's, forward and backward (module docstring)."""
    return 6.0 * parameters + 12.0 * layers * hidden * sequence


def mfu(tokens_per_second: float, per_token: float, devices: int, peak_tflops_per_device: float) -> float:
    """Achieved model FLOPs over the peak of all devices, a fraction in [0, 1] for a sane run."""
    return tokens_per_second * per_token / (devices * peak_tflops_per_device * 1e12)
