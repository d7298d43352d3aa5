#!/usr/bin/env python3
"""Markdown table for benches/RESULTS.md from a bench JSON file and the anchor's output of the
same device call: fused time, achieved GB/s and % of the floor (bytes recomputed with
2·Hq + 5·Hkv head rows per token, as the anchor counts them), the same-bytes `x + 1` copy's own
% of the copy bandwidth, the anchor's Triton and torch.compile times, the unfused Burn path.

usage: scripts/results_table.py BENCH.json ANCHOR.txt [COPY_GBPS]"""
import json
import re
import sys

HEADS = {"llama3-8b": (32, 8), "llama3-70b-tp8": (8, 1), "qwen2.5-7b": (28, 4)}
DTYPES = {"F32": ("float32", 4), "F16": ("float16", 2), "BF16": ("bfloat16", 2)}


def main(bench_json, anchor_txt, copy_gbps=4251.0):
    anchor = {}
    for line in open(anchor_txt):
        f = line.split()
        times = re.findall(r"([\d.]+)\(\s*\d+%\)", line)
        if len(f) > 3 and f[0] in ("float32", "float16", "bfloat16") and len(times) == 3:
            # eager, torch.compile, Triton (µs)
            anchor[(f[0], f[1], int(f[2]))] = [float(x) for x in times]
    rows = json.load(open(bench_json))
    print("| dtype | model | tokens | pool | fused µs | GB/s | % floor | copy % floor | Triton µs (% floor) | torch.compile µs | unfused µs | speed-up |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        hq, hkv = HEADS[r["model"]]
        name, elem = DTYPES[r["dtype"]]
        t = r["tokens"]
        bytes_ = t * 128 * elem * (2 * hq + 5 * hkv) + 8 * t
        floor_us = bytes_ / (copy_gbps * 1e3)
        fused = r["fused_us"]
        # The copy moved the bytes the bench counted then (r["bytes"]); its % is bytes-neutral.
        copy_pct = r["bytes"] / (copy_gbps * 1e3) / r["copy_us"] * 100
        a = anchor.get((name, r["model"], t)) if r["pool"] == 131072 else None
        tri = f"{a[2]:.1f} ({floor_us / a[2] * 100:.0f}%)" if a else "–"
        comp = f"{a[1]:.1f}" if a else "–"
        unf = r["unfused_us"]
        unf_s = f"{unf:.1f}" if unf is not None else "–"
        sp = f"{unf / fused:.0f}×" if unf is not None else "–"
        print(f"| {r['dtype']} | {r['model']} | {t} | {r['pool']} | {fused:.1f} | {bytes_ / fused / 1e3:.0f} | "
              f"{floor_us / fused * 100:.0f}% | {copy_pct:.0f}% | {tri} | {comp} | {unf_s} | {sp} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(float(x) for x in sys.argv[3:]))
