#!/usr/bin/env python3
"""The golden files of `pool_attention`: tests/golden/attention/*.safetensors.

What it makes: one safetensors file per case, in the format that
src/testing/attention_golden.rs reads (docs/CONTRACT.md, "Golden files"):
  tensors   q [T, H, D], k_pool, v_pool [P, K, D] (F32, standard normal);
            qo_indptr [B + 1], kv_indptr [B + 1], kv_indices [nnz] (I32: pool rows, drawn
            without replacement; a shared prefix repeats its rows);
            expected.out [T, H, D], expected.lse [T, H] (F64; lse = -inf where a query sees
            no key), absent from an `expect_error` case;
  metadata  op = pool_attention, head_dim, num_qo_heads, num_kv_heads, sm_scale, causal,
            optional sliding_window, logits_soft_cap, expect_error.
The expected values are the float64 reference of the stored (f32) inputs, computed here with
numpy from the contract's math, independently of the crate's Rust code: sequence b's query i
sits at context position p = L - n + i; it sees key j when j <= p (causal) and j > p - W
(sliding window W); s_j = sm_scale * q.k_j, then cap * tanh(s_j / cap) with a soft cap;
out = softmax(s) @ v, lse = log(sum exp(s)).

Inputs come from one numpy Generator (PCG64, seed 20261204) drawn case after case in the
order below, so the committed files are reproduced bit for bit (the header's metadata order
aside: safetensors writes it from a hash map).

Dependencies: python 3.9+, numpy >= 1.17 (written with 2.4), safetensors >= 0.4 (0.8).
No torch needed.

    pip install numpy safetensors
    python3 scripts/generators/attention_goldens.py OUT_DIR        # e.g. tests/golden/attention
    python3 scripts/generators/attention_goldens.py --check DIR    # recompute DIR's expected
                                                                   # values from its inputs

Run by hand, never by the tests.
"""

import math
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

SEED = 20261204

# name, heads (qo, kv), head_dim, pool rows, per-sequence query and key counts, extra.
# `shared_prefix`: the sequences' first rows are the same pool rows; `kv_indices`: rows given
# as they are (an invalid call); `qo_indptr`: given as it is (an invalid call); `qk_scale`: q and
# k_pool drawn with that standard deviation (logits large enough for the soft cap to bite).
CASES = [
    dict(name="decode_gqa", heads=(8, 2), head_dim=64, pool=256,
         qo=[1, 1, 1, 1], kv=[1, 7, 33, 130]),
    dict(name="prefill_causal", heads=(4, 4), head_dim=32, pool=64, qo=[37], kv=[37]),
    dict(name="mixed_extend", heads=(6, 2), head_dim=64, pool=96,
         qo=[1, 5, 9], kv=[20, 12, 9]),
    dict(name="shared_prefix_mqa", heads=(8, 1), head_dim=128, pool=200,
         qo=[1, 3], kv=[14, 16], shared_prefix=10),
    dict(name="sliding_window", heads=(4, 2), head_dim=64, pool=80,
         qo=[4, 1], kv=[30, 30], sliding_window=8),
    dict(name="soft_cap_d256", heads=(8, 4), head_dim=256, pool=64,
         qo=[1, 2], kv=[40, 9], logits_soft_cap=50.0, qk_scale=3.0),
    dict(name="bad_qo_indptr", heads=(4, 2), head_dim=16, pool=32, qo=[2, 1], kv=[4, 5],
         qo_indptr=[0, 2, 1], kv_indices=[16, 29, 24, 10, 11, 14, 6, 29, 31],
         expect_error="qo_indptr must start at 0, never decrease and end at num_tokens 3"),
]


def indptr(counts):
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


def reference(q, k_pool, v_pool, qo_indptr, kv_indptr, kv_indices, num_kv_heads, sm_scale,
              causal=True, sliding_window=None, logits_soft_cap=None):
    """out [T, H, D] and lse [T, H] in float64, from the contract's math."""
    q, k_pool, v_pool = (np.asarray(x, dtype=np.float64) for x in (q, k_pool, v_pool))
    tokens, heads, dim = q.shape
    group = heads // num_kv_heads
    out = np.zeros((tokens, heads, dim))
    lse = np.full((tokens, heads), -np.inf)
    for b in range(len(qo_indptr) - 1):
        q0, q1 = int(qo_indptr[b]), int(qo_indptr[b + 1])
        rows = np.asarray(kv_indices[kv_indptr[b]:kv_indptr[b + 1]], dtype=np.int64)
        n, length = q1 - q0, len(rows)
        for i in range(n):
            p = length - n + i
            j = np.arange(length)
            visible = np.ones(length, dtype=bool)
            if causal:
                visible &= j <= p
            if sliding_window is not None:
                visible &= j > p - sliding_window
            # A row outside the pool is never read: that key is masked.
            visible &= (rows >= 0) & (rows < k_pool.shape[0])
            if not visible.any():
                continue
            keys = rows[visible]
            for h in range(heads):
                kv = h // group
                s = sm_scale * (k_pool[keys, kv] @ q[q0 + i, h])
                if logits_soft_cap is not None:
                    s = logits_soft_cap * np.tanh(s / logits_soft_cap)
                top = s.max()
                w = np.exp(s - top)
                total = w.sum()
                out[q0 + i, h] = (w / total) @ v_pool[keys, kv]
                lse[q0 + i, h] = top + math.log(total)
    return out, lse


def make(case, rng):
    """The case's tensors and metadata, drawing from `rng`."""
    hq, hkv = case["heads"]
    d, pool = case["head_dim"], case["pool"]
    qo, kv = case["qo"], case["kv"]
    nnz = sum(kv)
    if "kv_indices" in case:
        kv_indices = np.array(case["kv_indices"], dtype=np.int32)
    elif "shared_prefix" in case:
        prefix = case["shared_prefix"]
        rows = rng.permutation(pool)[: prefix + sum(n - prefix for n in kv)]
        kv_indices, at = [], prefix
        for n in kv:
            kv_indices += list(rows[:prefix]) + list(rows[at:at + n - prefix])
            at += n - prefix
        kv_indices = np.array(kv_indices, dtype=np.int32)
    else:
        kv_indices = rng.permutation(pool)[:nnz].astype(np.int32)
    tokens = sum(qo)
    scale = case.get("qk_scale", 1.0)
    q = (rng.standard_normal((tokens, hq, d)) * scale).astype(np.float32)
    k_pool = (rng.standard_normal((pool, hkv, d)) * scale).astype(np.float32)
    v_pool = rng.standard_normal((pool, hkv, d)).astype(np.float32)
    qo_indptr = np.array(case.get("qo_indptr", indptr(qo)), dtype=np.int32)
    kv_indptr = indptr(kv)
    sm_scale = 1.0 / np.sqrt(d)
    tensors = dict(q=q, k_pool=k_pool, v_pool=v_pool, qo_indptr=qo_indptr,
                   kv_indptr=kv_indptr, kv_indices=kv_indices)
    meta = dict(op="pool_attention", head_dim=str(d), num_qo_heads=str(hq),
                num_kv_heads=str(hkv), sm_scale=str(sm_scale), causal="true")
    if "sliding_window" in case:
        meta["sliding_window"] = str(case["sliding_window"])
    if "logits_soft_cap" in case:
        meta["logits_soft_cap"] = str(case["logits_soft_cap"])
    if "expect_error" in case:
        meta["expect_error"] = case["expect_error"]
        # The committed invalid case prints the scale as numpy's repr; the loader reads both.
        meta["sm_scale"] = repr(sm_scale)
    else:
        out, lse = reference(q, k_pool, v_pool, qo_indptr, kv_indptr, kv_indices, hkv,
                             float(sm_scale), True, case.get("sliding_window"),
                             case.get("logits_soft_cap"))
        tensors["expected.out"] = out
        tensors["expected.lse"] = lse
    return tensors, meta


def write(out_dir):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for case in CASES:
        tensors, meta = make(case, rng)
        save_file(tensors, str(out_dir / f"{case['name']}.safetensors"), metadata=meta)
        print(out_dir / f"{case['name']}.safetensors")


def check(directory):
    """Recomputes each file's expected values from its own inputs; prints the largest diff."""
    from safetensors import safe_open

    worst = 0.0
    for path in sorted(Path(directory).glob("*.safetensors")):
        with safe_open(str(path), "np") as f:
            meta = f.metadata()
        if "expect_error" in meta:
            continue
        t = load_file(str(path))
        scale = meta["sm_scale"].removeprefix("np.float64(").removesuffix(")")
        out, lse = reference(
            t["q"], t["k_pool"], t["v_pool"], t["qo_indptr"], t["kv_indptr"], t["kv_indices"],
            int(meta["num_kv_heads"]), float(scale), meta["causal"] in ("true", "True"),
            int(meta["sliding_window"]) if "sliding_window" in meta else None,
            float(meta["logits_soft_cap"]) if "logits_soft_cap" in meta else None)
        same_inf = np.array_equal(np.isinf(lse), np.isinf(t["expected.lse"]))
        finite = np.isfinite(lse)
        diff = max(np.abs(out - t["expected.out"]).max(),
                   np.abs(lse[finite] - t["expected.lse"][finite]).max(initial=0.0))
        worst = max(worst, diff)
        print(f"{path.name}: max abs diff {diff:.3g}, -inf where expected: {same_inf}")
    print(f"largest: {worst:.3g}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    elif len(sys.argv) == 2:
        write(sys.argv[1])
    else:
        sys.exit(__doc__)
