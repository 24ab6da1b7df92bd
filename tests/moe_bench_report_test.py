"""bench/moe_bench.py's tables are issue 23's record: the ratios must be the ones the rows give,
a section with no rows must not print as an empty table, the training rows must say where tec's
step spends its time, and usage errors must be named on any machine. Runs on the CPU machine:
--report needs neither PyTorch nor a GPU."""
import json
import pathlib
import sys
import tempfile

from report_checks import Checks, script_runner

root = pathlib.Path(sys.argv[1])
checks = Checks()
expect = checks.expect
run = script_runner(root / "bench" / "moe_bench.py")

def train_row(contender, t, us, routing="uniform", **extra):
    return {"contender": contender, "T": t, "routing": routing, "us": us, **extra}

with tempfile.TemporaryDirectory() as tmp:
    out = pathlib.Path(tmp) / "run"
    out.mkdir()
    # The H200 call of 2026-11-28 at T=8192: tec fp8-current against torch.compile, the best peer.
    (out / "moe-tec-train.json").write_text(json.dumps([
        train_row("tec fp8-current train", 8192, 31490.0,
                  phases_us={"backward": 21243.4, "forward": 6030.1, "weight_workspace": 3837.8},
                  largest_steps=[["fc1.backward+fc1.weight.main_grad@1", 11247.8], ["fc2.backward+fc2.weight.main_grad@1", 6575.2]])]))
    (out / "moe-train-peers.json").write_text(json.dumps([
        train_row("loop bf16 train", 8192, 37484.0), train_row("compile bf16 train", 8192, 34347.0)]))
    done = run("--out", out, "--report")
    expect("--report exits 0", done.returncode == 0, done.stdout + done.stderr)
    text = done.stdout
    tec = next((l for l in text.splitlines() if l.strip().startswith("tec fp8-current train") and "(" in l), "")
    expect("the ratio is to the best peer of the same T (31490 / 34347 = 0.92)", "T=8192 31490 (0.92x)" in tec, tec)
    expect("no forward table is printed without forward results", "MoE layer forward" not in text, text)
    expect("a routing without rows is left out", "routing: skewed" not in text and "routing: uniform" in text, text)
    where = next((l for l in text.splitlines() if l.strip().startswith("tec fp8-current train") and "largest:" in l), "")
    expect("where the step's time goes: its phases", "backward 21243, forward 6030, weight_workspace 3838" in where, where)
    expect("... and its largest steps", "largest: fc1.backward+fc1.weight.main_grad@1 11248, fc2.backward" in where, where)
    expect("the table is also written to moe-table.txt", (out / "moe-table.txt").exists())

    empty = pathlib.Path(tmp) / "empty"
    done = run("--out", empty, "--report")
    expect("--report over no results fails and says so",
           done.returncode != 0 and "no results in" in done.stderr and not empty.exists(), done.stderr)
    for args, named in ((["--routings", "uniform,sideways"], "--routings uniform,sideways"), (["--part", "train,nonsense"], "--part nonsense"),
                        (["--tokens", "256,x"], "--tokens 256,x")):
        done = run("--out", out, *args)
        expect(f"{named}: a usage error naming it", done.returncode == 2 and named in done.stderr, done.stderr)

checks.finish()
