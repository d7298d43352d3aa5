"""The fp8 e4m3 golden file (`kernels/tests/golden/e4m3.json`): f32 inputs and their e4m3 codes from
an independent float64 encoder (numpy, written from the OCP FP8 definition: round to nearest
even, saturating to ±448, NaN to NaN), plus the value of every code. Cross-checked against
ml_dtypes' `float8_e4m3fn` and, where torch is installed, `torch.float8_e4m3fn` (both on inputs
clamped to ±448 first: their conversions overflow to NaN rather than saturate). The inputs are
every finite e4m3 value, every tie between two of them and the f32 neighbours of each tie, the
saturation and subnormal edges, and 4000 magnitudes drawn from numpy's PCG64 (seed 20261204),
each with both signs, NaN and ±0: `write` reproduces the committed file byte for byte.

Dependencies: python 3.9+, numpy >= 1.17 (2.4), ml_dtypes (0.7) for `write`; torch
(>= 2.1, which has float8_e4m3fn; 2.11 and 2.15 checked) for `check`.

    pip install numpy ml_dtypes
    python3 scripts/generators/fp8_golden.py write kernels/tests/golden/e4m3.json   # numpy + ml_dtypes
    python3 scripts/generators/fp8_golden.py check kernels/tests/golden/e4m3.json   # torch, where it is

Run by hand, never by the tests.
"""

import json
import math
import sys

import numpy as np

MAX = 448.0


def encode(v: float) -> int:
    """The e4m3 code of the float64 value `v`, from the format's definition."""
    sign = 0x80 if math.copysign(1.0, v) < 0 else 0
    if math.isnan(v):
        return sign | 0x7F
    a = min(abs(v), MAX)
    if a == 0.0:
        return sign
    _, e = math.frexp(a)  # a = m * 2^e, m in [0.5, 1): floor(log2 a) = e - 1
    exponent = max(e - 1, -6)  # below 2^-6 the quantum stays 2^-9
    quantum = 2.0 ** (exponent - 3)
    units = float(np.round(a / quantum))  # numpy rounds half to even
    value = units * quantum
    if value < 2.0**-6:
        return sign | int(units)  # subnormal: mantissa = units (0..8; 8 is 2^-6, code 0x08)
    _, e = math.frexp(value)
    exponent = e - 1
    mantissa = int(value / 2.0**exponent * 8) - 8
    return sign | ((exponent + 7) << 3) | mantissa


def decode(code: int) -> float:
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 7
    if code & 0x7F == 0x7F:
        return float("nan")
    if exponent == 0:
        return sign * mantissa * 2.0**-9
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def f32_bits(x: np.ndarray) -> list:
    return x.astype(np.float32).view(np.uint32).tolist()


def inputs() -> np.ndarray:
    rng = np.random.default_rng(20261204)
    finite = sorted({decode(c) for c in range(0x7F)})  # the positive values, 0..448
    values = list(finite)
    for lo, hi in zip(finite, finite[1:]):  # every tie, and the f32 neighbours of each
        mid = np.float32((lo + hi) / 2)
        values += [mid, np.nextafter(mid, np.float32(0)), np.nextafter(mid, np.float32(1e9))]
    values += [448, 449, 463.99, 464, 464.0001, 479.9, 480, 481, 1e30, 3.4e38, np.inf]
    values += [2.0**-10, 2.0**-10 * 1.0000001, 3 * 2.0**-10, 2.0**-12, 2.0**-40, 1e-45, 1.2e-38]
    magnitudes = 2.0 ** rng.uniform(-14, 10, 4000)
    values += list(magnitudes)
    x = np.array(values, dtype=np.float32)
    x = np.concatenate([x, -x, np.array([np.nan, -np.nan, 0.0, -0.0], dtype=np.float32)])
    return x


def write(path: str) -> None:
    x = inputs()
    codes = [encode(float(v)) for v in x]
    table = [decode(c) for c in range(256)]
    import ml_dtypes

    clamped = np.clip(x, -MAX, MAX)
    theirs = clamped.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    bad = [(float(v), c, int(t)) for v, c, t in zip(x, codes, theirs)
           if c != t and not (math.isnan(v) and (t & 0x7F) == 0x7F)]
    assert not bad, f"ml_dtypes disagrees on {len(bad)}: {bad[:5]}"
    their_table = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    for c, (a, b) in enumerate(zip(table, their_table)):
        assert (math.isnan(a) and math.isnan(b)) or a == b, (c, a, b)
    doc = {
        "format": "e4m3fn (OCP FP8), round to nearest even, saturating to +-448",
        "inputs_f32_bits": f32_bits(x),
        "codes": codes,
        "decoded_f32_bits": f32_bits(np.array(table)),
    }
    with open(path, "w") as f:
        json.dump(doc, f)
    print(f"{path}: {len(codes)} inputs, ml_dtypes agrees")


def check(path: str) -> None:
    import torch

    doc = json.load(open(path))
    x = np.array(doc["inputs_f32_bits"], dtype=np.uint32).view(np.float32)
    clamped = torch.from_numpy(np.clip(x, -MAX, MAX))
    theirs = clamped.to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    bad = [(float(v), c, int(t)) for v, c, t in zip(x, doc["codes"], theirs)
           if c != t and not (math.isnan(v) and (t & 0x7F) == 0x7F)]
    table = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).to(torch.float32)
    want = np.array(doc["decoded_f32_bits"], dtype=np.uint32).view(np.float32)
    bad_table = [c for c in range(256)
                 if not (math.isnan(want[c]) and math.isnan(table[c])) and want[c] != table[c]]
    print(f"torch {torch.__version__}: {len(x)} inputs, {len(bad)} codes differ {bad[:5]}, "
          f"{len(bad_table)} decoded values differ")
    sys.exit(1 if bad or bad_table else 0)


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2])
