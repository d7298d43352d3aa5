"""Writes `llama31_tiny_fp8_channel`: the tiny Llama checkpoint (`tests/models/llama31_tiny`) with
its projections in compressed-tensors' float8 layout, one scale per output channel
(`weight_scale [out, 1]`, `quant_method: "compressed-tensors"`, format `float-quantized`), and
transformers' float64 greedy generations of that checkpoint as transformers reads it through the
`compressed-tensors` package (decompressed: `e4m3 * weight_scale`): config.json,
model.safetensors, requests.json, expected.json.

Dependencies: python 3.10+, torch (CPU is enough; 2.15 wrote the committed files), transformers
5.x (5.25), compressed-tensors (0.20.1, with loguru and psutil), safetensors.

    pip install torch transformers compressed-tensors safetensors
    python3 scripts/generators/make_tiny_fp8_channel.py tests/models/llama31_tiny OUT_DIR

The quantization is the format's own rule for a symmetric per-channel float8 scale (the row's
largest magnitude over e4m3's largest, 448; each weight divided by it, clamped and rounded to
e4m3 by torch); the generations come from transformers' reading of the saved folder. Run by hand,
never by the tests; nothing here runs this crate's code.
"""

import json
import shutil
import sys
from pathlib import Path

import torch
from fp8_generations import write_expected
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, CompressedTensorsConfig

src = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/models/llama31_tiny")
out = Path(sys.argv[2] if len(sys.argv) > 2 else "llama31_tiny_fp8_channel")
out.mkdir(parents=True, exist_ok=True)

FP8_MAX = torch.finfo(torch.float8_e4m3fn).max
projections = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
saved = {}
for name, w in load_file(src / "model.safetensors").items():
    if name.endswith(".weight") and name.split(".")[-2] in projections:
        w = w.to(torch.float32)
        scale = (w.abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp(min=torch.finfo(torch.float32).tiny)
        saved[name] = (w / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        saved[name[: -len("weight")] + "weight_scale"] = scale
    else:
        saved[name] = w
save_file(saved, out / "model.safetensors", metadata={"format": "pt"})

config = json.loads((src / "config.json").read_text())
config["quantization_config"] = {
    "quant_method": "compressed-tensors",
    "format": "float-quantized",
    "quantization_status": "compressed",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {
                "num_bits": 8,
                "type": "float",
                "strategy": "channel",
                "symmetric": True,
                "dynamic": False,
            },
            "input_activations": None,
            "output_activations": None,
        }
    },
    "ignore": ["lm_head"],
}
(out / "config.json").write_text(json.dumps(config, indent=2))
shutil.copy(src / "requests.json", out / "requests.json")

# `dequantize=True`: transformers decompresses every weight on load.
decompress = CompressedTensorsConfig(dequantize=True)
model = AutoModelForCausalLM.from_pretrained(
    out, dtype=torch.float64, quantization_config=decompress
).eval()
weight = model.model.layers[0].self_attn.q_proj.weight
assert weight.dtype == torch.float64, weight.dtype
# The decompressed weight is the format's product, e4m3 times the row's scale.
q = saved["model.layers.0.self_attn.q_proj.weight"].to(torch.float32)
s = saved["model.layers.0.self_attn.q_proj.weight_scale"]
assert torch.equal(weight, (q * s).to(torch.float64)), "transformers decompressed another value"
write_expected(
    model, src, out, config, "float8_e4m3fn projections (weight_scale per output channel), float32 rest"
)
