#!/usr/bin/env python3
"""The summary of bench/gpu.sh: reads the logs of one run and writes one JSON file with everything that came out of
it (machine, stages, parity tests, the planner's CUDA prediction, the side-by-side rows), then prints a short
report: the parity tests, the predicted against the measured peaks, and the side-by-side table.

    python3 bench/gpu_summary.py WORK_DIR results.json
"""
import json
import os
import sys

MIB = 1024 * 1024
# The measured runs, in gpu.sh's order: <impl>-<config>.json.
CONFIGS = ("seed", "planned", "card", "offload", "80g", "cell-a", "cell-b")


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def last_json_line(path):
    """The last line of `path` that is a JSON object (bench train and the HF script print one), or None."""
    for line in reversed(read(path).splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def stages(work):
    rows = []
    for line in read(os.path.join(work, "stages.tsv")).splitlines():
        name, status, seconds = line.split("\t")
        rows.append({"stage": name, "status": status, "seconds": int(seconds)})
    return rows


def parity_tests(work):
    try:
        with open(os.path.join(work, "gpu_tests.json")) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return None
    failed, skipped = [], 0
    for suite in report.get("testsuites", []):
        for test in suite.get("testsuite", []):
            name = f"{suite['name']}.{test['name']}"
            if test.get("failures"):
                failed.append(name)
            elif test.get("result") == "SKIPPED":
                skipped += 1
    return {"tests": report.get("tests", 0), "failures": len(failed), "skipped": skipped, "failed": failed,
            "seconds": report.get("time", "")}


def plan_summary(work, name="plan.json"):
    try:
        with open(os.path.join(work, name)) as f:
            plan = json.load(f)
    except (OSError, ValueError):
        return None
    chosen = plan.get("chosen")
    return {"budget_bytes": plan.get("budget_bytes"), "budget_caps": plan.get("budget_caps"),
            "cuda_alloc_conf": plan.get("cuda_alloc_conf"), "chosen": chosen,
            "candidates": len(plan.get("candidates", [])), "explanation": plan.get("explanation")}


def compare(plan, seed):
    """Predicted against measured peaks (MiB) of the seed's configuration: the plan's CUDA terms and bench's own."""
    rows = []
    if not seed or "error" in seed:
        return rows
    cuda = ((plan or {}).get("chosen") or {}).get("breakdown", {}).get("cuda", {})
    for key in ("allocated", "reserved"):
        measured = seed.get(f"peak_{key}_mib")
        predicted = cuda.get(key, 0) / MIB if cuda.get(key) else seed.get(f"predicted_{key}_mib")
        if measured and predicted:
            rows.append({"what": key, "predicted_mib": round(predicted, 1), "measured_mib": round(measured, 1),
                         "error_percent": round(100 * (predicted / measured - 1), 1)})
    return rows


# Dense bfloat16 tensor-core rates (no sparsity), FLOP/s, by the name nvidia-smi prints: MFU's denominator.
DENSE_BF16 = {"H200": 989.4e12, "H100": 989.4e12, "A100": 312e12, "L40S": 362.05e12, "A10": 125e12}


def dense_bf16_rate(machine):
    override = os.environ.get("FITSUM_GPU_PEAK_TFLOPS")
    if override:
        return float(override) * 1e12
    name = machine[0] if machine else ""
    for key, rate in DENSE_BF16.items():
        if key in name:
            return rate
    return None


def predictions(rows, peak_rate):
    """Each fitsum row's predicted against measured peaks (the target: within 10%, never more than 5% under) and
    its MFU: the step's products, recomputation included, against the device's dense bf16 rate."""
    out = []
    for r in rows:
        if r.get("impl") != "fitsum" or "error" in r:
            continue
        row = {"config": r["config"]}
        for key in ("allocated", "reserved"):
            measured, predicted = r.get(f"peak_{key}_mib"), r.get(f"predicted_{key}_mib")
            if measured and predicted:
                error = 100 * (predicted / measured - 1)
                row[key] = {"predicted_mib": round(predicted, 1), "measured_mib": round(measured, 1),
                            "error_percent": round(error, 1), "holds": -5.0 <= error <= 10.0}
        step = r.get("step_s_median")
        if peak_rate and step and r.get("flops_per_step"):
            flops = r["flops_per_step"] + r.get("recompute_flops_per_step", 0.0)
            row["mfu_percent"] = round(100 * flops / step / peak_rate, 1)
        out.append(row)
    return out


def print_report(result):
    for s in result["stages"]:
        if s["status"] != "ok":
            print(f"  stage {s['stage']}: {s['status']}")
    tests = result["parity_tests"]
    if tests:
        print(f"parity tests: {tests['tests']} run, {tests['failures']} failed, {tests['skipped']} skipped"
              + (": " + ", ".join(tests["failed"][:8]) if tests["failed"] else ""))
    plan = result["plan_seed"]
    if plan and plan.get("chosen"):
        cuda = plan["chosen"]["breakdown"].get("cuda", {})
        terms = ", ".join(f"{k} {v / MIB:.0f}" for k, v in cuda.items() if k != "segments")
        print(f"plan (seed, budget caps {plan.get('budget_caps')}), MiB: peak "
              f"{plan['chosen']['predicted_peak_bytes'] / MIB:.0f}; {terms}")
    for c in result["planner_vs_measured"]:
        print(f"  {c['what']}: predicted {c['predicted_mib']:.0f} MiB, measured {c['measured_mib']:.0f} MiB "
              f"({c['error_percent']:+.1f}%)")
    for p in result["predictions"]:
        cells = [f"{k} {p[k]['predicted_mib']:.0f}/{p[k]['measured_mib']:.0f} MiB ({p[k]['error_percent']:+.1f}%"
                 f"{'' if p[k]['holds'] else ', OUT OF BOUNDS'})" for k in ("allocated", "reserved") if k in p]
        mfu = f", MFU {p['mfu_percent']:.1f}%" if "mfu_percent" in p else ""
        print(f"  {p['config']}: predicted/measured " + "; ".join(cells) + mfu)
    print("| config | impl | batch x accum | ckpt | bf16 | samples/s | step s | peak alloc MiB | peak reserved MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in result["side_by_side"]:
        if "error" in r:
            print(f"| {r['config']} | {r['impl']} | | | | {r['error']} | | {r.get('peak_allocated_mib', 0):.0f} | "
                  f"{r.get('peak_reserved_mib', 0):.0f} |")
            continue
        print(f"| {r['config']} | {r['impl']} | {r.get('batch')} x {r.get('gradient_accumulation_steps')} | "
              f"{r.get('gradient_checkpointing_layers', r.get('gradient_checkpointing'))} | {r.get('bf16')} | "
              f"{r.get('samples_per_s', 0):.2f} | {r.get('step_s_median', 0):.2f} | "
              f"{r.get('peak_allocated_mib', 0):.0f} | {r.get('peak_reserved_mib', 0):.0f} |")


def main():
    work, target = sys.argv[1], sys.argv[2]
    rows = []
    for config in CONFIGS:
        for impl in ("fitsum", "hf"):
            row = last_json_line(os.path.join(work, f"{impl}-{config}.json"))
            if row is not None:
                rows.append({**row, "config": config})
    plan = plan_summary(work)
    seed = next((r for r in rows if r.get("impl") == "fitsum" and r["config"] == "seed"), None)
    result = {"machine": read(os.path.join(work, "machine.txt")).splitlines(), "stages": stages(work),
              "parity_tests": parity_tests(work), "plan_seed": plan, "planner_vs_measured": compare(plan, seed),
              "side_by_side": rows, "plan_card": plan_summary(work, "plan-card.json")}
    result["predictions"] = predictions(rows, dense_bf16_rate(result["machine"]))
    with open(target, "w") as f:
        json.dump(result, f, indent=1)
    print_report(result)


if __name__ == "__main__":
    main()
