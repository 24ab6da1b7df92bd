#!/usr/bin/env python3
"""Fixture for the embedding tests (C API, examples/embed): compiles examples/mlp_tiny.json
under fp8-delayed for T=32, writes a seeded input x.npy, and the CPU reference's output for it
(te-run --backend cpu), which the tests must reproduce bit for bit; and the same model for
T=262144, whose 144 MiB arena the GPU fault test makes larger than free memory.

  make_expected.py --bin BUILD/cli --out DIR  ->  DIR/plan.teplan DIR/x.npy DIR/y.npy DIR/big_arena.teplan
"""
import argparse, subprocess, sys, tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--bin", type=Path, required=True, help="folder with te-compile and te-run")
ap.add_argument("--out", type=Path, required=True)
a = ap.parse_args()
a.out.mkdir(parents=True, exist_ok=True)
plan = a.out / "plan.teplan"
subprocess.run([a.bin / "te-compile", ROOT / "examples/mlp_tiny.json", "-o", plan, "--recipe", "fp8-delayed",
                "--shape", "T=32", "-q", "--cache-dir", "none"], check=True)
subprocess.run([a.bin / "te-compile", ROOT / "examples/mlp_tiny.json", "-o", a.out / "big_arena.teplan", "--recipe",
                "fp8-delayed", "--shape", "T=262144", "-q", "--cache-dir", "none"], check=True)
x = np.random.default_rng(7).standard_normal((32, 64)).astype(np.float32)
np.save(a.out / "x.npy", x)
with tempfile.TemporaryDirectory() as saved:
    subprocess.run([a.bin / "te-run", plan, "--backend", "cpu", "--input", f"x={a.out / 'x.npy'}", "--save-outputs", saved],
                   check=True, stdout=subprocess.DEVNULL)
    y = np.load(Path(saved) / "y.npy")
assert y.shape == (32, 64) and np.isfinite(y).all(), "the reference output is not finite"
np.save(a.out / "y.npy", y)
print(f"wrote {plan}, x.npy, y.npy (|y| mean {np.abs(y).mean():.3f})")
