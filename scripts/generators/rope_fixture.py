#!/usr/bin/env python3
"""Writes tests/fixtures/rope_frequencies.json: the RoPE frequencies of the config.json snippets
in tests/fixtures/hf_configs/, computed with numpy in float64 from transformers'
`modeling_rope_utils` formulas (written here independently of the crate's Rust code), so the test
`hf_configs.rs` checks the crate's config reader and frequency math against a second
implementation.

    pip install numpy && python3 scripts/generators/rope_fixture.py [OUT.json]

(OUT.json defaults to tests/fixtures/rope_frequencies.json.) Run by hand, never by the tests.
"""
import json
import math
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests/fixtures/hf_configs"


def text_config(cfg):
    if "num_attention_heads" not in cfg and "n_head" not in cfg and "text_config" in cfg:
        return cfg["text_config"]
    return cfg


def frequencies(cfg):
    cfg = text_config(cfg)
    gptj = cfg.get("model_type") == "gptj"
    heads = cfg.get("num_attention_heads", cfg.get("n_head"))
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or cfg.get("hidden_size", cfg.get("n_embd")) // heads
    params = cfg.get("rope_parameters")
    scaling = params if params is not None else (cfg.get("rope_scaling") or {})
    base = (params or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    partial = (params or {}).get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    dim = cfg["rotary_dim"] if gptj else int(head_dim * partial)
    max_pos = cfg.get("max_position_embeddings", cfg.get("n_positions"))
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    exponents = np.arange(0, dim, 2, dtype=np.float64) / dim
    inv_freq = 1.0 / base**exponents
    attention_factor = 1.0
    long_inv_freq = None
    long_from = None
    if rope_type == "linear":
        inv_freq = inv_freq / scaling["factor"]
    elif rope_type == "llama3":
        factor = scaling["factor"]
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        inv_freq = np.where(medium, smoothed, scaled)
    elif rope_type == "yarn":
        factor = scaling["factor"]
        original = scaling.get("original_max_position_embeddings") or max_pos
        beta_fast = scaling.get("beta_fast") or 32
        beta_slow = scaling.get("beta_slow") or 1

        def mscale(scale, m=1.0):
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        attention_factor = scaling.get("attention_factor")
        if attention_factor is None:
            m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")
            attention_factor = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)

        def correction(rotations):
            return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

        lo, hi = correction(beta_fast), correction(beta_slow)
        if scaling.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - lo) / (hi - lo), 0, 1)
        extrapolation = 1 - ramp
        inv_freq = (inv_freq / factor) * (1 - extrapolation) + inv_freq * extrapolation
    elif rope_type in ("longrope", "su"):
        original = scaling.get("original_max_position_embeddings") or cfg.get("original_max_position_embeddings")
        factor = scaling.get("factor") or 1.0
        if original:
            factor = max_pos / original
        else:
            original = max_pos
        attention_factor = scaling.get("attention_factor")
        if attention_factor is None:
            attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
        base_freq = 1.0 / base**exponents
        inv_freq = base_freq / np.array(scaling["short_factor"], dtype=np.float64)
        long_inv_freq = base_freq / np.array(scaling["long_factor"], dtype=np.float64)
        long_from = int(original)
    rows = None
    section = scaling.get("mrope_section")
    if section:
        t, h, w = section
        if scaling.get("mrope_interleaved"):
            rows = [1 if i % 3 == 1 and i < 3 * h else 2 if i % 3 == 2 and i < 3 * w else 0 for i in range(dim // 2)]
        else:
            rows = [0 if i < t else 1 if i < t + h else 2 for i in range(dim // 2)]
    return {
        "head_dim": int(head_dim),
        "num_qo_heads": int(heads),
        "num_kv_heads": int(kv_heads),
        "rotary_dim": int(dim),
        "style": "gptj" if gptj else "neox",
        "inv_freq": inv_freq.tolist(),
        "long_inv_freq": None if long_inv_freq is None else long_inv_freq.tolist(),
        "long_from": long_from,
        "attention_factor": float(attention_factor),
        "rows": rows,
    }


def main():
    out = {}
    for path in sorted(CONFIGS.glob("*.json")):
        out[path.name] = frequencies(json.loads(path.read_text()))
    target = ROOT / "tests/fixtures/rope_frequencies.json"
    if len(sys.argv) > 1:
        target = pathlib.Path(sys.argv[1])
    target.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {target} ({len(out)} configs)")


if __name__ == "__main__":
    main()
