#!/usr/bin/python3
"""Sums up a trace written by `fitsum bench train --profile FILE`: where one training step's time went.

Prints, per operator name, the self time (its duration minus that of the operators it called) and the time of
the outermost calls (which partition the step), largest first.

    /usr/bin/python3 bench/profile_summary.py FILE [--top N]
"""
import argparse
import collections
import json
import re


def load_events(path):
    text = open(path).read()
    # LibTorch 1.13 writes a trailing comma before the closing bracket.
    text = re.sub(r",\s*\]\s*$", "]", text.strip())
    return [e for e in json.loads(text) if e.get("ph") == "X"]


def summarize(events):
    self_time = collections.Counter()
    outer_time = collections.Counter()
    calls = collections.Counter()
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[e.get("tid")].append(e)
    total = 0.0
    for thread_events in by_thread.values():
        # Parents first: earlier start, then longer duration.
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # (end, name)
        for e in thread_events:
            start, dur, name = e["ts"], e["dur"], e["name"]
            while stack and stack[-1][0] <= start:
                stack.pop()
            if stack:
                self_time[stack[-1][1]] -= dur
            else:
                outer_time[name] += dur
                total += dur
            self_time[name] += dur
            calls[name] += 1
            stack.append((start + dur, name))
    return self_time, outer_time, calls, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    self_time, outer_time, calls, total = summarize(load_events(a.trace))
    print(f"profiled {total / 1e6:.3f} s in outermost operators")
    print(f"\n{'self time':>12} {'share':>6} {'calls':>6}  operator")
    for name, t in self_time.most_common(a.top):
        print(f"{t / 1e6:11.3f}s {100 * t / total:5.1f}% {calls[name]:6d}  {name}")
    print(f"\n{'outermost':>12} {'share':>6}  operator")
    for name, t in outer_time.most_common(a.top):
        print(f"{t / 1e6:11.3f}s {100 * t / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
