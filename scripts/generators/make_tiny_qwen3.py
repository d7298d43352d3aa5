"""Writes a tiny Qwen3 checkpoint with transformers, and transformers' own float64 greedy
generations for it, in the layout of the project's shared tiny models (`tests/models/*`):
config.json, model.safetensors, generation_config.json, expected.json.

Dependencies: python 3.9+, torch (CPU is enough; 2.11 wrote the committed files, 2.15
reproduces them), transformers 5.x (5.17 wrote them, 5.25 reproduces them: same weights bit for
bit, same expected.json but for the version fields), safetensors.

    pip install torch transformers safetensors
    python3 scripts/generators/make_tiny_qwen3.py OUT_DIR
    # or: python3 scripts/generators/tiny_checkpoints.py qwen3_tiny OUT_DIR

Unlike the other tiny checkpoints (tiny_checkpoints.py), the logits here are those of
transformers' `generate`, which hands them out as float32 (of the float64 model's logits).
Run by hand, never by the tests.

The weights are transformers' random init with a fixed seed, every RMSNorm weight (the per-head
q/k norms included) then drawn around 1 so that a wrong or missing norm shows in the logits.
Nothing here runs this crate's code: the generations are an independent reference.
"""

import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM

out = Path(sys.argv[1] if len(sys.argv) > 1 else "qwen3_tiny")
out.mkdir(parents=True, exist_ok=True)
torch.manual_seed(20261204)

config = Qwen3Config(
    vocab_size=320,
    hidden_size=96,
    intermediate_size=192,
    num_hidden_layers=3,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    rope_theta=1000000.0,
    tie_word_embeddings=True,
    # No end-of-sequence token: every request generates its `max_new_tokens` (as the crate's
    # `generate` does), and greedy picks the raw argmax at every step.
    bos_token_id=1,
    eos_token_id=None,
    pad_token_id=0,
    attention_bias=False,
    # Larger than the default 0.02, so that greedy decoding does not settle on one token.
    initializer_range=0.25,
)
config._attn_implementation = "eager"
model = Qwen3ForCausalLM(config).eval()
with torch.no_grad():
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.copy_(1.0 + 0.3 * torch.randn_like(p))
model.save_pretrained(out, safe_serialization=True)

# The float64 greedy generations, logits of every generated step.
model = model.double()
requests = [([1, 313, 45, 67, 100, 178], 15), ([1] + list(range(20, 32)), 7), ([1, 5, 9, 250], 11)]
sequences = []
for prompt, new in requests:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        res = model.generate(
            ids,
            max_new_tokens=new,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )
    logits = [step[0].tolist() for step in res.logits]
    gaps = []
    for row in logits:
        top = sorted(row, reverse=True)
        gaps.append(top[0] - top[1])
    sequences.append(
        {
            "prompt": prompt,
            "max_new_tokens": new,
            "generated": res.sequences[0, len(prompt):].tolist(),
            "logits": logits,
            "min_gap": min(gaps),
        }
    )
expected = {
    "dtype": "float32",
    "weights_dtype": "float32",
    "architecture": "Qwen3ForCausalLM",
    "transformers": transformers.__version__,
    "torch": torch.__version__,
    "sequences": sequences,
}
(out / "expected.json").write_text(json.dumps(expected))
print(out, [s["generated"] for s in sequences], "min gap", min(s["min_gap"] for s in sequences))
