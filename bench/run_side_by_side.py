#!/usr/bin/python3
"""fitsum against eager PyTorch and transformers' Seq2SeqTrainer, side by side in one run: training tokens/s,
peak memory, time to first step and MFU.

For each shape the runner first measures the machine's fp32 matmul rate (`fitsum bench matmul`: the rate of
the products fitsum's model runs, oneDNN's where the build and processor have it, the denominator of every
contender's MFU; the table's last column adds LibTorch's own at::mm rate, the eager loop's and HF's), then alternates
the contenders for --rounds rounds, one process per measurement, so that a slow spell of the machine hits every
contender alike: HF's Seq2SeqTrainer (bench/hf_trainer_bench.py) on the stack users install today (`--hf pip`, the
default: PyTorch 2.x from PyPI and the newest transformers, in the venv `make test-hf HF_TORCH=pip` makes) and on any
other `--hf` (`debian`: Debian's torch 1.13 with transformers 4.47; or a Python's path), the eager baseline
(../shared/reference/bench_eager.py, on Debian's python3-torch), `fitsum bench train` and any --variant. A
contender's step time is the median over rounds of its per-run median; its memory is the largest peak RSS (VmHWM)
seen. Ratios are against the first HF Trainer (the eager loop without one, fitsum without either).

    /usr/bin/python3 bench/run_side_by_side.py --fitsum build/fitsum --shapes small --rounds 3   # HF on PyTorch 2.x
    /usr/bin/python3 bench/run_side_by_side.py --fitsum build/fitsum --shapes small --rounds 3 --hf pip --hf debian
    /usr/bin/python3 bench/run_side_by_side.py --fitsum build/fitsum --shapes tiny,small --no_hf
    /usr/bin/python3 bench/run_side_by_side.py --fitsum build/fitsum --shapes small --rounds 3 --no_hf \\
        --variant "plain=--unfused all" --variant "threads 2+1=--num_threads 2 --blas_threads 1"
    /usr/bin/python3 bench/run_side_by_side.py --fitsum build/fitsum --shapes base --rounds 3 --lora_r 16
                                                            # LoRA: fitsum against HF Trainer + PEFT
    /usr/bin/python3 bench/run_side_by_side.py --fitsum build/fitsum --shapes pegasus-x-base --src_len 4096 \
        --tgt_len 256 --batch 1 --rounds 2 --steps 2 --config_overrides encoder_layers=2,decoder_layers=2
                                                            # PEGASUS-X at 4096 tokens, 2 + 2 layers at full width

The long-input shapes (pegasus-x-base, pegasus-x-large, long-t5-tglobal-base: configs/<shape>) run fitsum and the HF
Trainer only (the eager loop builds PEGASUS alone). --config_overrides changes the same config fields of both.

`--hf pip` and `--hf debian` make their venv with scripts/hf-venv.sh when the build folder has none (a download from
PyPI: about 3 GB for pip's torch); `--no_hf` leaves HF out.

With --lora_r both train LoRA adapters of that rank on a frozen base, PEFT's LoraConfig(r, lora_alpha,
target_modules) on the HF side and the same flags on fitsum's; the eager loop, which has no adapters, is left out.

Prints a Markdown table (and, with --json FILE, writes every run's output there).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {
    "tiny": os.path.join(ROOT, "configs", "pegasus-tiny", "config.json"),
    "small": os.path.join(ROOT, "configs", "pegasus-small", "config.json"),
    "base": os.path.join(ROOT, "configs", "pegasus-base", "config.json"),
    "large": os.path.join(ROOT, "data", "pegasus", "config.json"),
    # Released long-input architectures (fitsum's --shape names them too); the eager loop builds only PEGASUS.
    "pegasus-x-base": os.path.join(ROOT, "configs", "pegasus-x-base", "config.json"),
    "pegasus-x-large": os.path.join(ROOT, "configs", "pegasus-x-large", "config.json"),
    "long-t5-tglobal-base": os.path.join(ROOT, "configs", "long-t5-tglobal-base", "config.json"),
}
EAGER_SHAPES = ("tiny", "small", "base", "large")


def run_json(command, timeout):
    """Runs a benchmark process and returns the last JSON line it printed."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{' '.join(command)} printed no JSON line:\n{result.stdout[-2000:]}")
    return json.loads(lines[-1])


def hf_python(choice, build_dir):
    """The Python of an HF contender: a venv of scripts/hf-venv.sh (made when missing) or the path given."""
    if choice not in ("pip", "debian"):
        return choice
    venv = os.path.join(build_dir, "hf-venv-pip" if choice == "pip" else "hf-venv")
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        print(f"run_side_by_side: making {venv} with scripts/hf-venv.sh (--no_hf skips HF)", file=sys.stderr)
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "hf-venv.sh"), build_dir, choice],
                            stdout=subprocess.PIPE, text=True)
    if result.returncode != 0:
        sys.exit(f"run_side_by_side: scripts/hf-venv.sh {build_dir} {choice} failed; --no_hf runs without HF")
    return result.stdout.strip().splitlines()[-1]


def hf_contender_name(python):
    """'hf torch 2.14.1 tf 5.23.0': the versions the row was measured with."""
    result = subprocess.run([python, "-c", "import torch, transformers; print(torch.__version__.split('+')[0], "
                             "transformers.__version__)"], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"run_side_by_side: {python} cannot import torch and transformers:\n{result.stderr[-500:]}")
    torch_version, transformers_version = result.stdout.split()
    return f"hf torch {torch_version} tf {transformers_version}"


def load_average():
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fitsum", default=os.path.join(ROOT, "build", "fitsum"), help="the fitsum binary")
    ap.add_argument("--eager", default=os.path.join(ROOT, "..", "shared", "reference", "bench_eager.py"),
                    help="the eager baseline script")
    ap.add_argument("--python", default="/usr/bin/python3", help="the Python with torch for the baseline")
    ap.add_argument("--shapes", default="tiny,small",
                    help="comma-separated: tiny, small, base, large, pegasus-x-base, pegasus-x-large, "
                         "long-t5-tglobal-base")
    ap.add_argument("--config_overrides", default="",
                    help="k=v,k=v over the shape's config for fitsum and HF alike (e.g. encoder_layers=2,"
                         "decoder_layers=2: a reduced depth at full width)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--src_len", type=int, default=256)
    ap.add_argument("--tgt_len", type=int, default=64)
    ap.add_argument("--optim", default="adafactor", choices=["adafactor", "adamw"])
    ap.add_argument("--steps", type=int, default=5, help="timed steps per run (large: consider 2)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2, help="alternations of the contenders per shape")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=FLAGS: another fitsum contender, e.g. 'plain=--unfused all'")
    ap.add_argument("--no_eager", action="store_true", help="no eager baseline")
    ap.add_argument("--hf", action="append", default=[],
                    help="an HF Trainer contender: pip (PyTorch 2.x + newest transformers, the default), debian "
                         "(Debian's torch 1.13 + transformers 4.47), or the path of a Python with transformers; "
                         "repeat for several rows")
    ap.add_argument("--hf_python", action="append", default=[], help="the same as --hf PATH")
    ap.add_argument("--no_hf", action="store_true", help="no HF Trainer")
    ap.add_argument("--build_dir", default=os.path.join(ROOT, "build"), help="where --hf pip|debian's venvs live")
    ap.add_argument("--accumulation", type=int, default=1, help="gradient_accumulation_steps of every contender")
    ap.add_argument("--gradient_checkpointing", action="store_true", help="for fitsum and the HF Trainer")
    ap.add_argument("--lora_r", type=int, default=0, help="> 0: LoRA adapters of this rank for fitsum and HF (PEFT)")
    ap.add_argument("--lora_alpha", type=float, default=8.0, help="LoRA's lora_alpha (PEFT's default 8)")
    ap.add_argument("--lora_target_modules", default="q_proj,v_proj",
                    help="LoRA's target modules for both (PEGASUS has no PEFT default): names, or all-linear")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per process")
    ap.add_argument("--json", help="write every run's JSON output to this file")
    a = ap.parse_args()

    fitsum_optim = "adamw_torch" if a.optim == "adamw" else "adafactor"
    lora = []
    if a.lora_r > 0:
        lora = ["--lora_r", str(a.lora_r), "--lora_alpha", f"{a.lora_alpha:g}", "--lora_target_modules",
                a.lora_target_modules]
        a.no_eager = True  # the eager loop trains the whole model
    hf_pythons = [] if a.no_hf else [hf_python(choice, a.build_dir) for choice in (a.hf + a.hf_python) or ["pip"]]
    contenders = [(hf_contender_name(python), ("hf", python)) for python in hf_pythons]
    if not a.no_eager:
        contenders.append(("eager", None))
    contenders.append(("fitsum", []))
    for v in a.variant:
        name, _, flags = v.partition("=")
        contenders.append((f"fitsum {name}", flags.split()))

    runs = []
    rows = []
    loads = [load_average()]
    for shape in a.shapes.split(","):
        if shape not in CONFIGS:
            sys.exit(f"unknown shape '{shape}' (choose {', '.join(CONFIGS)})")
        matmul = run_json([a.fitsum, "bench", "matmul"], a.timeout)
        runs.append({"shape": shape, "contender": "matmul", **matmul})
        shape_contenders = [(name, flags) for name, flags in contenders
                            if flags is not None or (shape in EAGER_SHAPES and not a.config_overrides)]
        results = {name: [] for name, _ in shape_contenders}
        for round_index in range(a.rounds):
            for name, flags in shape_contenders:
                common = ["--batch", str(a.batch), "--src_len", str(a.src_len), "--tgt_len", str(a.tgt_len),
                          "--steps", str(a.steps), "--warmup", str(a.warmup)]
                knobs = ["--gradient_checkpointing"] if a.gradient_checkpointing else []
                if a.config_overrides:
                    knobs += ["--config_overrides", a.config_overrides]
                if flags is None:
                    command = [a.python, a.eager, "--config", CONFIGS[shape], "--optim", a.optim] + common
                elif isinstance(flags, tuple):
                    command = [flags[1], os.path.join(ROOT, "bench", "hf_trainer_bench.py"), "--device", "cpu",
                               "--config", CONFIGS[shape], "--optim", fitsum_optim, "--accumulation",
                               str(a.accumulation)] + common + knobs + lora
                else:
                    command = [a.fitsum, "bench", "train", "--shape", shape, "--optim", fitsum_optim,
                               "--gradient_accumulation_steps", str(a.accumulation)] + common + knobs + lora + flags
                started = time.time()
                out = run_json(command, a.timeout)
                out["wall_s"] = time.time() - started
                out["load_average"] = load_average()
                loads.append(out["load_average"])
                results[name].append(out)
                runs.append({"shape": shape, "contender": name, "round": round_index, **out})
                print(f"  {shape:5s} {name:24s} round {round_index + 1}: {out['step_s_median']:.3f} s/step, "
                      f"{out['peak_rss_mib']:.0f} MiB peak RSS (load {out['load_average']:.1f})", file=sys.stderr)
        # MFU needs the model's FLOPs: fitsum reports them (the same shapes and lengths for every contender).
        fitsum_runs = [r for name, rs in results.items() if name.startswith("fitsum") for r in rs]
        flops = fitsum_runs[0]["flops_per_step"]
        rate = matmul["gflops"] * 1e9
        summary = {}
        for name, rs in results.items():
            step = statistics.median(r["step_s_median"] for r in rs)
            summary[name] = {
                "step_s": step,
                "tokens_per_s": a.batch * a.accumulation * (a.src_len + a.tgt_len) / step,
                "first_step_s": statistics.median(r.get("first_step_s", float("nan")) for r in rs),
                "peak_rss_mib": max(r["peak_rss_mib"] for r in rs),
                "peak_tracked_mib": max((r.get("peak_tracked_mib", float("nan")) for r in rs)),
                "mfu": flops / step / rate,
            }
        rows.append((shape, matmul, summary))

    base = contenders[0][0]
    if lora:
        print(f"\nLoRA r {a.lora_r}, lora_alpha {a.lora_alpha:g}, target modules {a.lora_target_modules}")
    if a.config_overrides:
        print(f"\nconfig overrides (fitsum and HF): {a.config_overrides}")
    print(f"\nbatch {a.batch}, source {a.src_len}, target {a.tgt_len} tokens, {a.optim}, {a.rounds} rounds of "
          f"{a.steps} timed steps; load average {min(loads):.1f}-{max(loads):.1f}\n")
    header = "| shape | contender | tokens/s | vs " + base + " | peak RSS MiB | vs " + base + \
             " | time to first step s | tracked peak MiB | MFU | matmul GFLOP/s (LibTorch's mm) |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for shape, matmul, summary in rows:
        gflops = f"{matmul['gflops']:.0f}"
        if "libtorch_gflops" in matmul:
            gflops += f" ({matmul['libtorch_gflops']:.0f})"
        ref = summary[base] if base in summary else next(iter(summary.values()))
        for name, s in summary.items():
            tracked = "" if s["peak_tracked_mib"] != s["peak_tracked_mib"] else f"{s['peak_tracked_mib']:.0f}"
            print(f"| {shape} | {name} | {s['tokens_per_s']:.0f} | {s['tokens_per_s'] / ref['tokens_per_s']:.2f}x | "
                  f"{s['peak_rss_mib']:.0f} | {s['peak_rss_mib'] / ref['peak_rss_mib']:.2f}x | {s['first_step_s']:.1f} | "
                  f"{tracked} | "
                  f"{100 * s['mfu']:.0f}% | {gflops} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
