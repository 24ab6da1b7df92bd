"""bench/bench.py's table is issue 6's acceptance: its ratios must be the ones the rows give,
the best peer must be one within its error bound, and it must refuse clearly what it cannot
do. Runs on the CPU machine: --report needs neither PyTorch nor a GPU."""
import json
import pathlib
import sys
import tempfile

from report_checks import Checks, script_runner

root = pathlib.Path(sys.argv[1])
checks = Checks()
expect = checks.expect
run = script_runner(root / "bench" / "bench.py")

def row(contender, t, us, ok=True, error=0.05, bound=0.08):
    return {"contender": contender, "T": t, "us": us, "error": error, "bound": bound, "ok": ok}

with tempfile.TemporaryDirectory() as tmp:
    out = pathlib.Path(tmp) / "run"
    out.mkdir()
    (out / "tec.json").write_text(json.dumps([row("tec fp8-current", 16, 60.0), row("tec fp8-current", 128, 90.0)]))
    # The fastest peer at T=16 is outside its bound: it must not be the denominator.
    (out / "peers-eager_fp8-graph_bf16.json").write_text(json.dumps([
        row("eager fp8", 16, 30.0, ok=False, error=0.5), row("graph bf16", 16, 120.0, bound=0.01, error=0.004),
        row("graph bf16", 128, 150.0, bound=0.01, error=0.004)]))
    done = run("--out", out, "--report")
    expect("--report exits 0", done.returncode == 0, done.stdout + done.stderr)
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {"rows": []}
    by = {(r["contender"], r["T"]): r for r in results["rows"]}
    tec16 = by.get(("tec fp8-current", 16), {})
    expect("the ratio is to the best peer within its bound (60 / 120)", tec16.get("ratio_to_best_peer") == 0.5, tec16)
    expect("T=128: 90 / 150", abs(by.get(("tec fp8-current", 128), {}).get("ratio_to_best_peer", 0) - 0.6) < 1e-12)
    # floor at T=16: (2 * 4096 * 16384 FP8 weight bytes + 2 * 2 * 16 * 4096 bytes of x and y) / 3.0 TB/s
    floor16 = (2 * 4096 * 16384 + 2 * 2 * 16 * 4096) / 3.0e12 * 1e6
    expect("the floor ratio is bytes / bandwidth at T=16", abs(tec16.get("ratio_to_floor", 0) - 60.0 / floor16) < 1e-9, tec16)
    expect("the table names the best peer", "T=16 graph bf16 120.0 us" in done.stdout, done.stdout)
    eager = next((l for l in done.stdout.splitlines() if l.startswith("eager fp8")), "")
    expect("a result outside its bound is marked '!'", "30.0!" in eager, eager)
    expect("a T without a result shows '-'", eager.rstrip().endswith("-"), eager)

    empty = pathlib.Path(tmp) / "empty"
    done = run("--out", empty, "--report")
    expect("--report over no results fails and says so",
           done.returncode != 0 and "no results in" in done.stderr and not empty.exists(), done.stderr)

    done = run("--out", out, "--part", "tec,nonsense")
    expect("an unknown --part is a usage error naming it", done.returncode == 2 and "--part nonsense" in done.stderr, done.stderr)
    done = run("--out", out)
    expect("nothing to do is a usage error", done.returncode == 2 and "nothing to do" in done.stderr, done.stderr)
    done = run("--out", out, "--tokens", "16,x", "--report")
    expect("bad --tokens is a usage error", done.returncode == 2 and "--tokens 16,x" in done.stderr, done.stderr)

    try:
        import torch
        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if has_gpu:
        print("skip the no-GPU refusal: this machine has a GPU")
    else:
        done = run("--out", out, "--part", "tec")
        expect("--part without PyTorch or a GPU fails and says what it needs",
               done.returncode != 0 and ("needs PyTorch" in done.stderr or "needs a CUDA GPU" in done.stderr)
               and "Traceback" not in done.stderr, done.stderr)

checks.finish()
