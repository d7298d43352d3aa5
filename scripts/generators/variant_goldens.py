#!/usr/bin/env python3
"""The golden files of the RoPE variants: tests/golden/variants/*.safetensors.

What it makes: one safetensors file per case, in the format of op_goldens.py (same tensors,
same `expected.*` outputs) plus the variant metadata that src/testing/golden.rs reads
(docs/CONTRACT.md, "Golden files"): `rope_style` (neox | gptj), `rotary_dim`, and where they
apply `rope_scaling` (JSON: transformers' `rope_parameters` less `rope_theta`, plus the model's
`max_position_embeddings`), `mrope_section` (JSON list) and `mrope_interleaved` (true | false);
M-RoPE positions are I32 [3, T].

The expected values are the float64 reference of the stored (f32) inputs, computed here with
numpy: inverse frequencies `rope_base ** (-2i / rotary_dim)`, or for a scaled rope
transformers' own `modeling_rope_utils` function (llama3, yarn) run in float64 (it creates its
tensors as float32; they are made float64 here), cos and sin times the attention factor, pairs
(i, i + rotary_dim/2) for neox and (2i, 2i + 1) for gptj over the first `rotary_dim` elements of
each head (the rest pass through), M-RoPE frequency i taking its position from row 0, 1 or 2 of
`positions`.
Nothing here runs the crate's Rust code.

The committed files' float inputs came from a generator whose seed is not known: this script
draws its own (numpy PCG64, seed 20261204), so its files have the committed files' names,
shapes, dtypes, metadata, positions and slots, but other q/k/v/pool values; `--check DIR`
recomputes DIR's expected values from DIR's own inputs and metadata with this script's math.

Dependencies: python 3.9+, numpy >= 1.17 (written with 2.4), safetensors >= 0.4 (0.8), and for
the scaled cases torch (CPU is enough; 2.15) and transformers >= 5 (5.25: `rope_parameters`).
Imports op_goldens.py from this folder.

    pip install numpy safetensors transformers torch
    python3 scripts/generators/variant_goldens.py OUT_DIR          # e.g. a temporary folder
    python3 scripts/generators/variant_goldens.py --check DIR      # e.g. tests/golden/variants

Run by hand, never by the tests.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import op_goldens  # noqa: E402

SEED = 20261204

LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192, "max_position_embeddings": 131072}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
        "max_position_embeddings": 131072}

# name, head_dim, heads (qo, kv), rope_base, style, rotary_dim, pool rows, positions, slots;
# optional rope_scaling, mrope_section (+ mrope_interleaved), expect_error.
CASES = [
    dict(name="gptj_interleaved", head_dim=64, heads=(4, 2), rope_base=10000.0, style="gptj",
         rotary_dim=64, pool=16, positions=[2147, 804, 2029, 1539, 364, 2612],
         slots=[-1, 10, 4, 1, 8, -1]),
    dict(name="neox_partial_quarter", head_dim=64, heads=(4, 4), rope_base=10000.0,
         style="neox", rotary_dim=16, pool=16, positions=[1258, 2403, 1737, 415, 2796, 92],
         slots=[2, 9, 12, -1, 0, 1]),
    dict(name="llama31_scaling", head_dim=128, heads=(8, 2), rope_base=500000.0, style="neox",
         rotary_dim=128, pool=32, rope_scaling=LLAMA31,
         positions=[107437, 108690, 67333, 87212, 3555, 59582, 54739, 114815],
         slots=[8, 12, -1, 3, -1, 30, 4, -1]),
    dict(name="yarn_qwen", head_dim=128, heads=(7, 1), rope_base=1000000.0, style="neox",
         rotary_dim=128, pool=32, rope_scaling=YARN,
         positions=[62406, 128648, 16016, 18897, 14850, 71423, 75845, 36534],
         slots=[30, 23, 11, 21, 18, 3, 17, -1]),
    dict(name="mrope_qwen2vl", head_dim=128, heads=(4, 2), rope_base=1000000.0, style="neox",
         rotary_dim=128, pool=32, mrope_section=[16, 24, 24], mrope_interleaved=False,
         positions=[[1052, 4929, 724, 3736, 8050, 7856, 3931, 2189],
                    [676, 3674, 867, 5827, 482, 2682, 273, 5583],
                    [2042, 3393, 2256, 1029, 1317, 2169, 1417, 2518]],
         slots=[12, -1, -1, 15, 3, 14, 0, -1]),
    dict(name="bad_rotary_dim", head_dim=8, heads=(4, 2), rope_base=10000.0, style="neox",
         rotary_dim=10, pool=8, positions=[54, 5, 38], slots=[0, 7, 7],
         expect_error="rotary_dim must be even and in 2..=head_dim, got 10 for head_dim 8"),
]


def inv_freq_of(base, dim, scaling, head_dim):
    """(inv_freq [dim/2], attention_factor) in float64: `base ** (-2i / dim)` for the default
    rope, else transformers' own function for `rope_type` (`ROPE_INIT_FUNCTIONS`), run with
    torch's float32 names pointing at float64 (those functions create their tensors as
    `torch.float` / `torch.float32`)."""
    rope_type = (scaling or {}).get("rope_type", "default")
    if rope_type == "default":
        return base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim), 1.0
    import torch
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    parameters = dict(scaling)
    max_positions = parameters.pop("max_position_embeddings")
    parameters["rope_theta"] = base
    if dim != head_dim:
        parameters["partial_rotary_factor"] = dim / head_dim
    heads = 4
    config = LlamaConfig(hidden_size=head_dim * heads, num_attention_heads=heads,
                         head_dim=head_dim, max_position_embeddings=max_positions,
                         rope_parameters=parameters)
    saved = torch.float, torch.float32
    torch.float = torch.float32 = torch.float64
    try:
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config, "cpu")
    finally:
        torch.float, torch.float32 = saved
    assert inv_freq.dtype == torch.float64
    return inv_freq.numpy(), float(attention_factor)


def rope_variant(x, positions, base, style, rotary_dim, head_dim, scaling=None, section=None,
                 interleaved=False):
    """The RoPE variant of x [T, H, D] (float64) at positions [T] (or [3, T] with M-RoPE)."""
    x = np.asarray(x, dtype=np.float64)
    half = rotary_dim // 2
    inv_freq, attention = inv_freq_of(base, rotary_dim, scaling, head_dim)
    positions = np.asarray(positions, dtype=np.float64)
    if section is not None:
        t, h, w = section
        if interleaved:
            rows = [1 if i % 3 == 1 and i < 3 * h else 2 if i % 3 == 2 and i < 3 * w else 0
                    for i in range(half)]
        else:
            rows = [0 if i < t else 1 if i < t + h else 2 for i in range(half)]
        angle = positions[rows, :].T * inv_freq[None, :]
    else:
        angle = positions[:, None] * inv_freq[None, :]
    cos = (np.cos(angle) * attention)[:, None, :]
    sin = (np.sin(angle) * attention)[:, None, :]
    out = x.copy()
    if style == "gptj":
        x1, x2 = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        out[..., 0:rotary_dim:2] = x1 * cos - x2 * sin
        out[..., 1:rotary_dim:2] = x1 * sin + x2 * cos
    else:
        x1, x2 = x[..., :half], x[..., half:rotary_dim]
        out[..., :half] = x1 * cos - x2 * sin
        out[..., half:rotary_dim] = x1 * sin + x2 * cos
    return out


def rope_of_meta(meta):
    """The rope function of a file's metadata, for op_goldens.reference."""
    scaling = json.loads(meta["rope_scaling"]) if "rope_scaling" in meta else None
    section = json.loads(meta["mrope_section"]) if "mrope_section" in meta else None
    interleaved = meta.get("mrope_interleaved") == "true"
    rotary_dim = int(meta.get("rotary_dim", meta["head_dim"]))
    style = meta.get("rope_style", "neox")

    def rope(x, positions, base):
        return rope_variant(x, positions, base, style, rotary_dim, int(meta["head_dim"]), scaling,
                            section, interleaved)

    return rope


def make(case, rng):
    d, (hq, hkv) = case["head_dim"], case["heads"]
    tokens, pool = len(case["slots"]), case["pool"]

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    t = {
        "q": normal(tokens, hq, d),
        "k": normal(tokens, hkv, d),
        "v": normal(tokens, hkv, d),
        "k_pool": normal(pool, hkv, d),
        "v_pool": normal(pool, hkv, d),
        "positions": np.array(case["positions"], dtype=np.int32),
        "slots": np.array(case["slots"], dtype=np.int32),
    }
    meta = {"head_dim": str(d), "num_qo_heads": str(hq), "num_kv_heads": str(hkv),
            "rope_base": str(case["rope_base"]), "rope_style": case["style"],
            "rotary_dim": str(case["rotary_dim"])}
    if "rope_scaling" in case:
        meta["rope_scaling"] = json.dumps(case["rope_scaling"])
    if "mrope_section" in case:
        meta["mrope_section"] = json.dumps(case["mrope_section"])
        meta["mrope_interleaved"] = "true" if case["mrope_interleaved"] else "false"
    if "expect_error" in case:
        meta["expect_error"] = case["expect_error"]
    else:
        t.update(op_goldens.reference(t, case["rope_base"], rope_of_meta(meta)))
    return t, meta


def write(out_dir):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for case in CASES:
        tensors, meta = make(case, rng)
        path = out_dir / f"{case['name']}.safetensors"
        save_file(tensors, str(path), metadata=meta)
        print(path)


def check(directory):
    return op_goldens.check(
        directory,
        lambda t, meta: op_goldens.reference(t, float(meta["rope_base"]), rope_of_meta(meta)))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    elif len(sys.argv) == 2:
        write(sys.argv[1])
    else:
        sys.exit(__doc__)
