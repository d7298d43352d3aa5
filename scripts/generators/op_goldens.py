#!/usr/bin/env python3
"""The golden files of `rope_pool_fused` (plain NeoX RoPE): tests/golden/*.safetensors.

What it makes: one safetensors file per case, in the format that src/testing/golden.rs reads
(docs/CONTRACT.md, "Golden files"):
  tensors   q [T, Hq, D], k, v [T, Hkv, D], k_pool, v_pool [P, Hkv, D] (F32, standard normal);
            positions [T], slots [T] (I32; a slot < 0 or >= P writes nothing);
            expected.q_rot, expected.k_rot, expected.k_pool, expected.v_pool (F64), absent
            from an `expect_error` case;
  metadata  head_dim, num_qo_heads, num_kv_heads, rope_base, optional expect_error.
The expected values are the float64 reference of the stored (f32) inputs, computed here with
numpy from the contract's math, independently of the crate's Rust code:
  inv_freq[i] = rope_base ** (-2i / head_dim), angle = positions[t] * inv_freq[i],
  out[i] = x1 cos - x2 sin, out[i + D/2] = x1 sin + x2 cos  (x1 = x[i], x2 = x[i + D/2]);
  the pools are the input pools with row slots[t] set to k_rot[t] / v[t] for each valid slot.

The committed files' float inputs came from a generator whose seed is not known: this script
draws its own (numpy PCG64, seed 20261204), so its files have the committed files' names,
shapes, dtypes, metadata, positions and slots, but other q/k/v/pool values; `--check DIR`
recomputes DIR's expected values from DIR's own inputs with this script's math instead.

Dependencies: python 3.9+, numpy >= 1.17 (written with 2.4), safetensors >= 0.4 (0.8).
No torch needed.

    pip install numpy safetensors
    python3 scripts/generators/op_goldens.py OUT_DIR          # e.g. a temporary folder
    python3 scripts/generators/op_goldens.py --check DIR      # e.g. tests/golden

Run by hand, never by the tests.
"""

import sys
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

SEED = 20261204

# name, head_dim, heads (qo, kv), rope_base, pool rows, positions, slots; `q_heads`: the heads
# q is stored with when they differ from the config's (an invalid call).
CASES = [
    dict(name="tiny_gqa", head_dim=8, heads=(4, 2), rope_base=10000.0, pool=16,
         positions=[1307, 84, 1683, 1476], slots=[6, 5, 10, 4]),
    dict(name="mha", head_dim=32, heads=(4, 4), rope_base=10000.0, pool=8,
         positions=[2280, 3126, 2327, 2946, 3685], slots=[-3, -1, -2, 3, 5]),
    dict(name="llama_like", head_dim=64, heads=(8, 2), rope_base=500000.0, pool=32,
         positions=[3082, 454, 1517, 70, 1972, 1270, 33], slots=[-1, 16, 0, 10, 11, 1, -3]),
    dict(name="head_dim_2", head_dim=2, heads=(2, 1), rope_base=10000.0, pool=4,
         positions=[2916, 1979, 8], slots=[1, 2, 0]),
    dict(name="all_skipped", head_dim=16, heads=(2, 2), rope_base=10000.0, pool=6,
         positions=[3978, 3878, 3003], slots=[-2, -2, -2]),
    # Positions up to 2^20: the angle must stay exact in f32 far past the usual contexts.
    dict(name="long_positions", head_dim=128, heads=(2, 1), rope_base=10000.0, pool=8,
         positions=[0, 131071, 524287, 1048575], slots=[7, -1, 0, 1]),
    dict(name="bad_q_heads", head_dim=8, heads=(4, 2), rope_base=10000.0, pool=8,
         positions=[2, 5, 0], slots=[6, 4, 4], q_heads=2,
         expect_error="q shape must be [num_tokens, num_qo_heads, head_dim], got [3, 2, 8]"),
]


def rope_neox(x, positions, base):
    """NeoX RoPE of x [T, H, D] (float64) at positions [T]."""
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    half = d // 2
    inv_freq = base ** (-2.0 * np.arange(half, dtype=np.float64) / d)
    angle = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def reference(t, base, rope=rope_neox):
    """The four expected outputs of inputs `t` (a dict of arrays) in float64."""
    q_rot = rope(t["q"], t["positions"], base)
    k_rot = rope(t["k"], t["positions"], base)
    k_pool = np.array(t["k_pool"], dtype=np.float64)
    v_pool = np.array(t["v_pool"], dtype=np.float64)
    for i, slot in enumerate(np.asarray(t["slots"]).tolist()):
        if 0 <= slot < k_pool.shape[0]:
            k_pool[slot] = k_rot[i]
            v_pool[slot] = t["v"][i]
    return {"expected.q_rot": q_rot, "expected.k_rot": k_rot,
            "expected.k_pool": k_pool, "expected.v_pool": v_pool}


def make(case, rng):
    d, (hq, hkv) = case["head_dim"], case["heads"]
    tokens, pool = len(case["positions"]), case["pool"]

    def normal(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    t = {
        "q": normal(tokens, case.get("q_heads", hq), d),
        "k": normal(tokens, hkv, d),
        "v": normal(tokens, hkv, d),
        "k_pool": normal(pool, hkv, d),
        "v_pool": normal(pool, hkv, d),
        "positions": np.array(case["positions"], dtype=np.int32),
        "slots": np.array(case["slots"], dtype=np.int32),
    }
    meta = {"head_dim": str(d), "num_qo_heads": str(hq), "num_kv_heads": str(hkv),
            "rope_base": str(case["rope_base"])}
    if "expect_error" in case:
        meta["expect_error"] = case["expect_error"]
    else:
        t.update(reference(t, case["rope_base"]))
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


def check(directory, reference_of=None):
    """Recomputes each valid file's expected values from its own inputs; prints the diffs."""
    worst = 0.0
    for path in sorted(Path(directory).glob("*.safetensors")):
        with safe_open(str(path), "np") as f:
            meta = f.metadata()
        if "expect_error" in meta or meta.get("op") == "pool_attention":
            continue
        t = load_file(str(path))
        want = reference_of(t, meta) if reference_of else reference(t, float(meta["rope_base"]))
        diff = max(np.abs(want[k] - t[k]).max() for k in want)
        worst = max(worst, diff)
        print(f"{path.name}: max abs diff {diff:.3g}")
    print(f"largest: {worst:.3g}")
    return worst


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    elif len(sys.argv) == 2:
        write(sys.argv[1])
    else:
        sys.exit(__doc__)
