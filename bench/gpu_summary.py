#!/usr/bin/env python3
"""The summary of bench/gpu.sh: the side-by-side table (fitsum and the HF Trainer, samples/s and peak memory) and the
memory planner's CUDA prediction for the seed's configuration against what `fitsum bench train` measured.

    python3 bench/gpu_summary.py plan.json side_by_side.jsonl
"""
import json
import sys

MIB = 1024 * 1024


def table(rows):
    print("| config | impl | batch x accumulation | bf16 | samples/s | step s | peak allocated MiB | peak reserved MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['config']} | {r['impl']} | | | {r['error']} | | {r.get('peak_allocated_mib', 0):.0f} | "
                  f"{r.get('peak_reserved_mib', 0):.0f} |")
            continue
        print(f"| {r['config']} | {r['impl']} | {r['batch']} x {r['gradient_accumulation_steps']} | {r.get('bf16')} | "
              f"{r['samples_per_s']:.2f} | {r['step_s_median']:.2f} | {r.get('peak_allocated_mib', 0):.0f} | "
              f"{r.get('peak_reserved_mib', 0):.0f} |")


def planner(plan, rows):
    chosen = plan.get("chosen") or (plan.get("candidates") or [None])[0]
    measured = next((r for r in rows if r.get("impl") == "fitsum" and r.get("config") == "seed" and "error" not in r),
                    None)
    if chosen is None or measured is None:
        print("planner: no prediction or no measurement to compare")
        return
    cuda = chosen["breakdown"].get("cuda", {})
    predicted = {"allocated": cuda.get("allocated", chosen["predicted_peak_bytes"]), "reserved": cuda.get("reserved")}
    print("\nplanner, seed's configuration (predicted / measured by torch.cuda.max_memory_*):")
    for key in ("allocated", "reserved"):
        got = measured.get(f"peak_{key}_mib", 0.0)
        want = predicted[key]
        if want is None or got == 0:
            print(f"  {key}: predicted {want}, measured {got:.0f} MiB")
            continue
        print(f"  {key}: predicted {want / MIB:.0f} MiB, measured {got:.0f} MiB, error {100 * (want / MIB / got - 1):+.1f}%")
    if cuda:
        terms = ", ".join(f"{k} {v / MIB:.1f} MiB" for k, v in cuda.items() if isinstance(v, int) and k != "segments")
        print(f"  terms: {terms}")


def main():
    plan = {}
    try:
        with open(sys.argv[1]) as f:
            plan = json.load(f)
    except (OSError, ValueError) as e:
        print(f"planner: no plan ({e})")
    rows = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
    table(rows)
    if plan:
        planner(plan, rows)


if __name__ == "__main__":
    main()
