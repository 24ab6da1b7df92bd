"""Reference conversions (src/reference/convert.cpp) against independent oracles.

ml_dtypes gives the round-to-nearest-even grid for E4M3, E5M2 and E2M1, but turns overflow
into NaN/inf where TE's casts saturate, so inputs are clipped to +-max before comparing and
saturation, infinities and NaN are tested on their own. E8M0 (round toward +inf) and bf16
are computed here from their definitions."""
import math
import subprocess
import sys

import ml_dtypes
import numpy as np

tool = sys.argv[1]
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else "  " + detail))
    passed += bool(ok)
    failed += not ok


def run(fmt, data):
    out = subprocess.run([tool, fmt], input=data.tobytes(), capture_output=True, check=True).stdout
    return out


def vectors(dtype, max_finite):
    """Every code's value, every midpoint between neighbours (ties), their neighbours one
    float ulp away, subnormals, random values over the whole range, and -0."""
    if dtype == ml_dtypes.float4_e2m1fn:
        grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
        values = np.concatenate([grid, -grid])
    else:
        values = np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32)
    finite = np.unique(values[np.isfinite(values)]).astype(np.float64)
    mids = ((finite[1:] + finite[:-1]) / 2).astype(np.float32)
    near = np.concatenate([np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)])
    rng = np.random.default_rng(1234)
    rand = (rng.standard_normal(100000) * np.exp2(rng.uniform(-12, math.log2(max_finite), 100000))).astype(np.float32)
    tiny = np.array([1e-30, -1e-30, 1e-10, np.float32(2.0**-10), np.float32(2.0**-16), np.float32(2.0**-20)], np.float32)
    x = np.concatenate([finite.astype(np.float32), mids, near, rand, tiny, np.array([-0.0, 0.0], np.float32)])
    return np.clip(x, -max_finite, max_finite).astype(np.float32)


for name, fmt, dtype, max_finite in [
    ("e4m3", "e4m3", ml_dtypes.float8_e4m3fn, 448.0),
    ("e5m2", "e5m2", ml_dtypes.float8_e5m2, 57344.0),
    ("e2m1", "e2m1", ml_dtypes.float4_e2m1fn, 6.0),
]:
    x = vectors(dtype, max_finite)
    got = np.frombuffer(run(fmt, x), dtype=np.uint8)
    want = x.astype(dtype).view(np.uint8) & (0xFF if fmt != "e2m1" else 0x0F)
    bad = np.nonzero(got != want)[0]
    check(f"{name}: {len(x)} values (all codes, ties, neighbours, subnormals, random) round to nearest even",
          len(bad) == 0, f"{len(bad)} mismatches, first: x={x[bad[:5]]} got={got[bad[:5]]} want={want[bad[:5]]}")
    # -0 keeps its sign.
    neg_zero = np.frombuffer(run(fmt, np.array([-0.0], np.float32)), np.uint8)[0]
    check(f"{name}: -0 encodes as the negative zero code", neg_zero == (0x80 if fmt != "e2m1" else 0x8))
    # Saturation, like cvt.rn.satfinite: past max (and +-inf) -> +-max.
    big = np.array([max_finite * 1.01, max_finite * 1000, np.inf, -max_finite * 1.5, -np.inf, 3e38], np.float32)
    got = np.frombuffer(run(fmt, big), np.uint8)
    max_code = {"e4m3": 0x7E, "e5m2": 0x7B, "e2m1": 0x7}[fmt]
    neg = {"e4m3": 0x80, "e5m2": 0x80, "e2m1": 0x8}[fmt]
    check(f"{name}: overflow and infinities saturate to +-max",
          list(got) == [max_code, max_code, max_code, max_code | neg, max_code | neg, max_code], str(list(got)))
    # NaN in gives NaN out (FP8); FP4 has no NaN and gives +max.
    nan_code = np.frombuffer(run(fmt, np.array([np.nan, -np.nan], np.float32)), np.uint8)
    check(f"{name}: NaN", list(nan_code) == ([0x7F, 0x7F] if fmt != "e2m1" else [0x7, 0x7]), str(list(nan_code)))

# Decoding every code.
for fmt, dtype, n in [("e4m3", ml_dtypes.float8_e4m3fn, 256), ("e5m2", ml_dtypes.float8_e5m2, 256),
                      ("e2m1", ml_dtypes.float4_e2m1fn, 16)]:
    codes = np.arange(n, dtype=np.uint8)
    got = np.frombuffer(run("decode-" + fmt, codes), np.float32)
    if fmt == "e2m1":
        grid = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
        want = np.array([float(g) for g in grid] + [-float(g) for g in grid], np.float32)
    else:
        want = codes.view(dtype).astype(np.float32)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    same &= np.signbit(got) == np.signbit(want)
    check(f"{fmt}: all {n} codes decode exactly (with -0, inf and NaN)", same.all(), str(np.nonzero(~same)[0][:8]))


def e8m0_oracle(v):
    """Smallest biased exponent e with 2^(e-127) >= v, saturated to 254; NaN -> 255."""
    if math.isnan(v):
        return 255
    if v == 0:
        return 0
    if math.isinf(v):
        return 254
    m, e = math.frexp(v)  # v = m * 2^e, m in [0.5, 1)
    ceil_log2 = e - 1 if m == 0.5 else e
    return max(0, min(254, ceil_log2 + 127))


rng = np.random.default_rng(7)
e8_inputs = np.concatenate([
    np.exp2(np.arange(-149, 128, dtype=np.float64)).astype(np.float32),
    (np.exp2(rng.uniform(-149, 128, 20000))).astype(np.float32),
    np.array([0.0, np.inf, np.nan, 2.0**-127, 2.0**-127 * 1.5, 2.0**-126, np.finfo(np.float32).max,
              np.float32(2.0**127) * np.float32(1.0000001), 1e-45], np.float32),
])
with np.errstate(over="ignore"):
    e8_inputs = np.concatenate([e8_inputs, np.nextafter(e8_inputs, np.float32(np.inf))])
got = np.frombuffer(run("e8m0", e8_inputs), np.uint8)
want = np.array([e8m0_oracle(float(v)) for v in e8_inputs], np.uint8)
bad = np.nonzero(got != want)[0]
check(f"e8m0: {len(e8_inputs)} values round up to a power of two (subnormals, saturation, NaN)", len(bad) == 0,
      f"x={e8_inputs[bad[:5]]} got={got[bad[:5]]} want={want[bad[:5]]}")

x = np.concatenate([rng.standard_normal(50000).astype(np.float32),
                    np.array([0.0, -0.0, np.inf, -np.inf, 3.3895314e38, 1e-40], np.float32)])
got = np.frombuffer(run("bf16", x), np.uint16)
want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
check(f"bf16: {len(x)} values round to nearest even", (got == want).all(), str(np.nonzero(got != want)[0][:5]))

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
