"""Writes `llama31_tiny_fp8`: the tiny Llama checkpoint (`tests/models/llama31_tiny`) with its
projections quantized to fp8 e4m3 by transformers' own fine-grained FP8 quantizer (per-block
`weight_scale_inv`, blocks of 32 x 32 so that every projection has several), saved in
HuggingFace's fine-grained FP8 layout (`quantization_config.quant_method = "fp8"`), and
transformers' float64 greedy generations of that checkpoint as transformers loads it without a
GPU (each weight dequantized, `e4m3 * weight_scale_inv` in float32): config.json,
model.safetensors, generation_config.json, requests.json, expected.json.

Dependencies: python 3.9+, torch (CPU is enough; 2.15 wrote the committed files), transformers
5.x (5.25 wrote them), accelerate (transformers' FP8 loader asks for it), safetensors.

    pip install torch transformers accelerate safetensors
    python3 scripts/generators/make_tiny_fp8.py tests/models/llama31_tiny OUT_DIR

The quantization runs transformers' `Fp8Quantize` (the op its quantizer applies when it loads a
model on a GPU; torch only, so it runs here on the CPU); the checkpoint is then read back through
`from_pretrained` like any published FP8 checkpoint. Run by hand, never by the tests; nothing
here runs this crate's code.
"""

import json
import shutil
import sys
from pathlib import Path

import torch
from fp8_generations import write_expected
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, FineGrainedFP8Config
from transformers.integrations.finegrained_fp8 import Fp8Quantize

src = Path(sys.argv[1] if len(sys.argv) > 1 else "tests/models/llama31_tiny")
out = Path(sys.argv[2] if len(sys.argv) > 2 else "llama31_tiny_fp8")
out.mkdir(parents=True, exist_ok=True)

quantization = FineGrainedFP8Config(weight_block_size=[32, 32])


class Quantizer:
    """What `Fp8Quantize` reads of transformers' quantizer."""

    quantization_config = quantization


quantize = Fp8Quantize(Quantizer())
weights = load_file(src / "model.safetensors")
projections = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
saved = {}
for name, tensor in weights.items():
    if name.endswith(".weight") and name.split(".")[-2] in projections:
        saved.update(quantize._quantize_one(name, tensor))
    else:
        saved[name] = tensor
assert sum(t.dtype == torch.float8_e4m3fn for t in saved.values()) == 7 * 3
save_file(saved, out / "model.safetensors", metadata={"format": "pt"})

config = json.loads((src / "config.json").read_text())
config["quantization_config"] = quantization.to_dict()
(out / "config.json").write_text(json.dumps(config, indent=2))
for name in ("generation_config.json", "requests.json"):
    if (src / name).exists():
        shutil.copy(src / name, out / name)

# transformers' own reading of the checkpoint: without a GPU it dequantizes every projection.
model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64).eval()
assert model.model.layers[0].self_attn.q_proj.weight.dtype == torch.float64
write_expected(
    model,
    src,
    out,
    config,
    "float8_e4m3fn projections (32 x 32 blocks of weight_scale_inv), float32 rest",
)
