#!/usr/bin/env python3
"""The tiny checkpoints of tests/models/: llama31_tiny, llama31_tiny_bf16, qwen2_tiny (written
here) and qwen3_tiny (written by make_tiny_qwen3.py beside this file, which this script runs for
that name).

What it makes, in OUT_DIR, as transformers' `save_pretrained` writes them:
  config.json, generation_config.json, model.safetensors (weights: transformers' random init
  with a fixed seed, every matrix then scaled by 4 (exact in binary), so that the logits
  spread: std 0.08 instead of the config's initializer_range 0.02; norms 1, biases 0);
  expected.json: transformers' own greedy generations in float64 (the model's weights, as
  stored, cast to float64; each step's logits the full forward pass's last row, never rounded
  to float32), in the layout docs/CONTRACT.md gives for the `generate` example plus the
  prompts: {"dtype", "weights_dtype", "architecture", "sequences": [{"prompt",
  "max_new_tokens", "generated", "logits", "min_gap"}]} (`min_gap`: the smallest margin between
  the chosen logit and the runner-up over the steps, how far greedy is from a tie);
  llama31_tiny also gets requests.json (its requests, for the `generate` example), and its
  config.json is rewritten in the older form (`rope_theta` + `rope_scaling` instead of
  `rope_parameters`) so that the crate's reader of that form is tested.
The tests read config.json, model.safetensors and expected.json (tests/suite/generate.rs);
tests/models/ keeps no generation_config.json for the first three.

Nothing here runs the crate's code: the generations are an independent reference.

Dependencies: python 3.10+, torch (CPU is enough; 2.15), transformers 5.x (5.24 wrote the
committed files, 5.25 reproduces them), safetensors, numpy.

    pip install torch transformers safetensors numpy
    python3 scripts/generators/tiny_checkpoints.py NAME OUT_DIR
    # NAME: llama31_tiny | llama31_tiny_bf16 | qwen2_tiny | qwen3_tiny

Run by hand, never by the tests.
"""

import json
import runpy
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

COMMON = dict(
    vocab_size=320,
    hidden_size=96,
    intermediate_size=192,
    num_hidden_layers=3,
    num_attention_heads=6,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
    initializer_range=0.02,
)
LLAMA31 = dict(
    COMMON,
    head_dim=16,
    tie_word_embeddings=False,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 512},
)
MODELS = {
    "llama31_tiny": dict(
        seed=101, config=(LlamaConfig, LlamaForCausalLM, LLAMA31), dtype=torch.float32,
        old_rope_config=True, write_requests=True,
        requests=[([1, 45, 43, 255, 161], 12),
                  ([1, 190, 193, 228, 12, 156, 49, 130, 297, 176, 25], 4),
                  ([1, 175], 20),
                  ([1, 44, 242, 303, 313, 200, 278, 119, 49, 165, 143, 213, 318, 90, 274, 46,
                    113], 9)]),
    "llama31_tiny_bf16": dict(
        seed=200, config=(LlamaConfig, LlamaForCausalLM, LLAMA31), dtype=torch.bfloat16,
        requests=[([1, 252, 81, 215, 148, 165, 301, 261, 269], 10), ([1, 177, 314], 16)]),
    "qwen2_tiny": dict(
        seed=300,
        config=(Qwen2Config, Qwen2ForCausalLM,
                dict(COMMON, tie_word_embeddings=True,
                     rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
        dtype=torch.float32,
        requests=[([1, 313, 45, 67, 100, 178], 15),
                  ([1, 264, 156, 314, 114, 297, 190, 231, 77, 190, 257, 284, 277], 7),
                  ([1, 309, 43, 249], 11)]),
}


def greedy(model, prompt, new_tokens):
    """transformers' float64 greedy generation: ids, each step's logits, the smallest margin."""
    ids = list(prompt)
    generated, logits, gaps = [], [], []
    with torch.no_grad():
        for _ in range(new_tokens):
            row = model(torch.tensor([ids])).logits[0, -1]
            top = torch.topk(row, 2).values
            token = int(torch.argmax(row))
            generated.append(token)
            logits.append(row.tolist())
            gaps.append(float(top[0] - top[1]))
            ids.append(token)
    return generated, logits, min(gaps)


def make(name, out):
    spec = MODELS[name]
    config_class, model_class, fields = spec["config"]
    config = config_class(**fields)
    config._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = model_class(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    model = model.to(spec["dtype"])
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)

    if spec.get("old_rope_config"):
        path = out / "config.json"
        saved = json.loads(path.read_text())
        rope = saved.pop("rope_parameters")
        saved["rope_theta"] = rope.pop("rope_theta")
        saved["rope_scaling"] = dict(sorted(rope.items()))
        path.write_text(json.dumps(saved, indent=2))

    model = model.double()
    sequences = []
    for prompt, new_tokens in spec["requests"]:
        generated, logits, gap = greedy(model, prompt, new_tokens)
        sequences.append({"prompt": prompt, "max_new_tokens": new_tokens,
                          "generated": generated, "logits": logits, "min_gap": gap})
    expected = {
        "dtype": "float32",
        "weights_dtype": str(spec["dtype"]).removeprefix("torch."),
        "architecture": model_class.__name__,
        "sequences": sequences,
    }
    (out / "expected.json").write_text(json.dumps(expected))
    if spec.get("write_requests"):
        requests = {"sequences": [{"prompt": p, "max_new_tokens": n}
                                  for p, n in spec["requests"]]}
        (out / "requests.json").write_text(json.dumps(requests) + "\n")
    print(out, [s["generated"] for s in sequences],
          "min gap", min(s["min_gap"] for s in sequences))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in [*MODELS, "qwen3_tiny"]:
        sys.exit(__doc__)
    if sys.argv[1] == "qwen3_tiny":
        script = Path(__file__).resolve().parent / "make_tiny_qwen3.py"
        sys.argv = [str(script), sys.argv[2]]
        runpy.run_path(str(script), run_name="__main__")
    else:
        make(sys.argv[1], Path(sys.argv[2]))
