"""The typed wire beside pickle, and sealed channels beside unsealed ones, measured in one run.

1. Codec vs pickle, on the main job's own messages. The main job (``jobs/train.py``'s defaults:
   credit, 2 parties, Paillier 2048, depth 5, 32 bins) runs its first ``--capture-trees`` trees and
   scores the test rows, then 10 plaintext trees run, in a Ray whose workers record every payload
   their mailboxes send (a worker set-up hook). Each payload of the main job is then encoded and
   decoded by the codec and by pickle (protocol 5, as the send path did before), alternating which
   goes first, ``--codec-repeat`` times; the table shows each one's best CPU time per kind, and the
   bytes.
2. What sealing adds. (a) The CPU time of sealing every captured message for its receivers and of
   opening it at each (best of ``--codec-repeat``), per tree, against the training time of the
   fastest unsealed fit of (b). (b) Fits alternating unsealed and sealed in one Ray: the main job
   (``--repeat`` fits of each) and 10 plaintext trees (``--plain-repeat`` of each), with wall-clock
   training seconds, the seconds the parties spent on the wire (encoding, sealing, opening, decoding
   and checking: the ``wire`` intervals of ``ray_vfl.runtime.timeline``), MB metered and test AUC.
   Unsealed fits use the runtime's benchmark-only switch (``Runtime._seal_messages = False``: messages
   travel as the encoded payload). On a busy machine (b)'s wall clock varies by tens of percent from
   fit to fit; (a) does not depend on the load.

    python benchmarks/wire.py                                 # 3 captured trees; 3 + 3 main fits, 7 + 7 plaintext
    python benchmarks/wire.py --repeat 0 --plain-repeat 0     # the CPU-time tables only
"""

from __future__ import annotations

import argparse
import glob
import os
import pickle
import statistics
import sys
import tempfile
import time

import ray

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ray_vfl import Runtime, SecureBoostClassifier, vertical_split  # noqa: E402
from ray_vfl.data.bundled import load_named  # noqa: E402
from ray_vfl.runtime.codec import decode, encode  # noqa: E402
from ray_vfl.runtime.local_ray import INLINE_BYTES, RESOURCE_UNITS, _no_phone_home, party_resource  # noqa: E402
from ray_vfl.runtime.seal import Seal  # noqa: E402
from ray_vfl.trees.callbacks import TreeTimer  # noqa: E402

PARTIES = ["party0", "party1"]
MAIN = dict(max_depth=5, max_bin=32, learning_rate=0.3, backend="paillier", key_bits=2048)
PLAIN = dict(max_depth=5, backend="plain")


def credit():
    frame, label, cats, _ = load_named("credit")
    return vertical_split(frame, 2, label=label, categorical=cats, seed=0).train_test_split(0.2, seed=0)


# ---------------------------------------------------------------------------------------------
# 1. the main job's messages, codec vs pickle
def _recording_hook(folder: str):
    """A Ray worker set-up hook: every payload a mailbox of this worker sends is appended to a file,
    with the job the driver names in ``<folder>/job``."""
    def hook():
        from ray_vfl.runtime import comm

        send = comm.Mailbox.send

        def recording_send(self, kind, receivers, payload, tree=-1, depth=-1):
            with open(os.path.join(folder, "job"), encoding="utf-8") as fh:
                job = fh.read()
            with open(os.path.join(folder, f"{os.getpid()}.pkl"), "ab") as fh:
                pickle.dump((job, kind, len(tuple(receivers)), payload), fh, protocol=5)
            return send(self, kind, receivers, payload, tree, depth)

        comm.Mailbox.send = recording_send
    return hook


def capture(trees: int) -> list[tuple[str, str, int, object]]:
    """``(job, kind, receivers, payload)`` of every message of ``trees`` trees of the main job and of
    scoring its test rows, and of 10 plaintext trees."""
    train, test = credit()
    folder = tempfile.mkdtemp(prefix="wire_capture")
    with _no_phone_home():
        ray.init(address="local", resources={party_resource(p): RESOURCE_UNITS for p in PARTIES},
                 include_dashboard=False, log_to_driver=False, runtime_env={"worker_process_setup_hook": _recording_hook(folder)},
                 _system_config={"max_direct_call_object_size": INLINE_BYTES})
    try:
        rt = Runtime()
        for job, params, n in (("main", MAIN, trees), ("plain", PLAIN, 10)):
            with open(os.path.join(folder, "job"), "w", encoding="utf-8") as fh:
                fh.write(job)
            model = SecureBoostClassifier(n_estimators=n, runtime=rt, **params).fit(train)
            if job == "main":
                model.predict_margin(test)
        rt.kill_all()
    finally:
        ray.shutdown()
    records = []
    for path in sorted(glob.glob(os.path.join(folder, "*.pkl"))):
        with open(path, "rb") as fh:
            while True:
                try:
                    records.append(pickle.load(fh))
                except EOFError:
                    break
        os.unlink(path)
    os.unlink(os.path.join(folder, "job"))
    os.rmdir(folder)
    return records


def _best(fn, payload, repeat_inner: int) -> float:
    """CPU seconds of one call (this thread's: other processes on a busy machine do not count)."""
    start = time.thread_time()
    for _ in range(repeat_inner):
        fn(payload)
    return (time.thread_time() - start) / repeat_inner


def codec_table(records: list, repeat: int) -> None:
    records = [(kind, payload) for job, kind, _, payload in records if job == "main"]
    pickle_dumps = lambda p: pickle.dumps(p, protocol=5)  # noqa: E731 - the send path before the codec
    rows: dict[str, dict[str, float]] = {}
    for kind, payload in records:
        w_pickle, w_codec = pickle_dumps(payload), encode(payload)
        inner = max(1, min(200, int(2e5 // max(1, len(w_codec)))))  # small messages: many calls per sample
        best = {"pe": 1e9, "pd": 1e9, "ce": 1e9, "cd": 1e9}
        for r in range(repeat):
            pair = [("p", pickle_dumps, pickle.loads, w_pickle), ("c", encode, decode, w_codec)]
            for tag, enc, dec, wire in (pair if r % 2 == 0 else pair[::-1]):  # alternate which goes first
                best[tag + "e"] = min(best[tag + "e"], _best(enc, payload, inner))
                best[tag + "d"] = min(best[tag + "d"], _best(dec, wire, inner))
        row = rows.setdefault(kind, {"n": 0, "pb": 0, "cb": 0, "pe": 0.0, "pd": 0.0, "ce": 0.0, "cd": 0.0})
        row["n"] += 1
        row["pb"] += len(w_pickle)
        row["cb"] += len(w_codec)
        for k in ("pe", "pd", "ce", "cd"):
            row[k] += best[k]
    total = {k: sum(r[k] for r in rows.values()) for k in ("n", "pb", "cb", "pe", "pd", "ce", "cd")}
    print("\n| kind | messages | pickle MB | codec MB | bytes codec/pickle | pickle ms (enc + dec) | codec ms (enc + dec) "
          "| time codec/pickle |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, r in sorted(rows.items()) + [("**all**", total)]:
        pt, ct = (r["pe"] + r["pd"]) * 1e3, (r["ce"] + r["cd"]) * 1e3
        print(f"| {kind} | {r['n']} | {r['pb'] / 1e6:.3f} | {r['cb'] / 1e6:.3f} | {r['cb'] / r['pb']:.4f} "
              f"| {pt:.2f} ({r['pe'] * 1e3:.2f} + {r['pd'] * 1e3:.2f}) | {ct:.2f} ({r['ce'] * 1e3:.2f} + {r['cd'] * 1e3:.2f}) "
              f"| {ct / pt:.2f} |")


# ---------------------------------------------------------------------------------------------
# 2. what sealing costs: its CPU time on the captured messages, and fits alternating sealed and unsealed
def seal_cost(records: list, repeat: int) -> dict[str, dict[str, float]]:
    """CPU seconds of sealing every captured message for its receivers and of opening it at each,
    best of ``repeat`` (the added work; a message is sealed and opened on the protocol's critical path)."""
    sender, receivers = Seal("wire_sender"), [Seal(f"wire_receiver{i}") for i in range(8)]
    out: dict[str, dict[str, float]] = {}
    for job, kind, n, payload in records:
        plain, to = encode(payload), tuple(f"wire_receiver{i}" for i in range(n))
        inner = max(1, min(100, int(2e5 // max(1, len(plain)))))
        best_seal = best_open = 1e9
        for _ in range(repeat):
            start = time.thread_time()
            sealed = [sender.seal(kind, to, 0, 0, plain) for _ in range(inner)]
            best_seal = min(best_seal, (time.thread_time() - start) / inner)
            start = time.thread_time()
            for wire in sealed:
                for r in receivers[:n]:
                    r.unseal(kind, "wire_sender", to, 0, 0, wire)
            best_open = min(best_open, (time.thread_time() - start) / inner)
        row = out.setdefault(job, {"n": 0, "plain": 0, "sealed": 0, "seal": 0.0, "open": 0.0})
        row["n"] += 1
        row["plain"] += len(plain) * n
        row["sealed"] += len(sealed[0]) * n
        row["seal"] += best_seal
        row["open"] += best_open
    return out


def _actor_cpu(rt: Runtime) -> float:
    """CPU seconds the parties' actor processes (where messages are sealed and opened; not their pool
    tasks, nor the label party's mask reserve, which takes whatever CPU is idle) have used so far."""
    parties = [(k, h) for k, h in rt.actors.items() if ":" not in k]
    pids = [pid for _, pid in rt.get([(k, h.alive.remote()) for k, h in parties], "pids")]
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _wire_seconds(rt: Runtime) -> float:
    return sum(end - start for t in rt.timelines().values() for kind, start, end in t["spans"] if kind == "wire")


def alternate(rt: Runtime, name: str, params: dict, trees: int, repeat: int, train, test) -> dict:
    """Fits alternating unsealed and sealed; returns the runs of each."""
    runs: dict[bool, list[dict]] = {True: [], False: []}
    SecureBoostClassifier(n_estimators=1, runtime=rt, **params).fit(train)  # start the actors, uncounted
    for r in range(repeat):
        for sealed in ((False, True) if r % 2 == 0 else (True, False)):
            rt._seal_messages = sealed
            rt.timelines()  # drop what earlier fits measured
            timer = TreeTimer()
            cpu = _actor_cpu(rt)
            start = time.perf_counter()
            model = SecureBoostClassifier(n_estimators=trees, runtime=rt, callbacks=[timer], **params).fit(train)
            fit_s = time.perf_counter() - start
            cpu = _actor_cpu(rt) - cpu
            wire_s = _wire_seconds(rt)
            runs[sealed].append({"train": timer.seconds, "fit": fit_s, "wire": wire_s, "cpu": cpu,
                                 "mb": model.comm_stats_.total_mb, "auc": model.model_.evaluate(test)["auc"],
                                 "load": os.getloadavg()[0]})
            print(f"  {name}, {'sealed' if sealed else 'unsealed'}: train {timer.seconds:.3f} s, fit {fit_s:.3f} s, "
                  f"wire {wire_s:.3f} s, actors' CPU {cpu:.2f} s, load average {os.getloadavg()[0]:.1f}", flush=True)
    rt._seal_messages = True
    return runs


def print_alternating(name: str, trees: int, runs: dict) -> None:
    repeat = len(runs[True])
    med = {s: {k: statistics.median(run[k] for run in runs[s]) for k in runs[s][0]} for s in runs}
    print(f"\n{name}: {trees} trees, median of {repeat} fits each, alternating (wall clock; the machine's load "
          f"average {min(r['load'] for s in runs for r in runs[s]):.1f}-{max(r['load'] for s in runs for r in runs[s]):.1f})\n")
    print("| | train s (each fit) | fit s | wire s (all parties, wall clock) | party actors' CPU s (each fit) | MB "
          "| test AUC |")
    print("|---|---|---|---|---|---|---|")
    for s in (False, True):
        m = med[s]
        each = ", ".join(f"{run['train']:.2f}" for run in runs[s])
        cpus = ", ".join(f"{run['cpu']:.2f}" for run in runs[s])
        print(f"| {'sealed' if s else 'unsealed'} | {m['train']:.3f} ({each}) | {m['fit']:.3f} | {m['wire']:.3f} "
              f"| {m['cpu']:.2f} ({cpus}) | {m['mb']:.3f} | {m['auc']:.5f} |")
    print(f"| sealed / unsealed | {(med[True]['train'] / med[False]['train'] - 1) * 100:+.1f} % "
          f"| {(med[True]['fit'] / med[False]['fit'] - 1) * 100:+.1f} % | {med[True]['wire'] - med[False]['wire']:+.3f} s "
          f"| {med[True]['cpu'] - med[False]['cpu']:+.2f} s | {(med[True]['mb'] / med[False]['mb'] - 1) * 100:+.3f} % | |")


def print_seal_cost(cost: dict, trees: dict[str, int], runs: dict[str, dict]) -> None:
    print("\nWhat sealing adds: CPU time of sealing each captured message and opening it at each receiver (best of "
          "the repeats), against the fastest unsealed fit's training time\n")
    print("| job | messages | payload MB | sealed MB | seal ms | open ms | per tree ms | fastest unsealed train s "
          "| added |")
    print("|---|---|---|---|---|---|---|---|---|")
    for job, row in cost.items():
        per_tree = (row["seal"] + row["open"]) / trees[job] * 1e3
        line = (f"| {job} | {row['n']} | {row['plain'] / 1e6:.3f} | {row['sealed'] / 1e6:.3f} | {row['seal'] * 1e3:.2f} "
                f"| {row['open'] * 1e3:.2f} | {per_tree:.2f} |")
        if job in runs:
            fastest = min(r["train"] for r in runs[job][False]) / 10  # per tree: the fits grow 10
            line += f" {fastest * 10:.3f} | {per_tree / 1e3 / fastest * 100:.2f} % |"
        else:
            line += " | |"
        print(line)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture-trees", type=int, default=3, help="main-job trees to capture (0: no CPU tables)")
    parser.add_argument("--codec-repeat", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3, help="main-job fits per mode (0: skip)")
    parser.add_argument("--plain-repeat", type=int, default=7, help="plaintext fits per mode (0: skip)")
    args = parser.parse_args(argv)
    cost = {}
    if args.capture_trees:
        records = capture(args.capture_trees)
        print(f"Codec vs pickle: {sum(r[0] == 'main' for r in records)} payloads of {args.capture_trees} trees of the "
              f"main job and its test scoring, CPU time, best of {args.codec_repeat} alternating")
        codec_table(records, args.codec_repeat)
        cost = seal_cost(records, args.codec_repeat)
        del records
    runs = {}
    if args.repeat or args.plain_repeat:
        train, test = credit()
        rt = Runtime()
        try:
            for job, name, params, repeat in (("plain", "plaintext trees (credit, 2 parties, depth 5)", PLAIN, args.plain_repeat),
                                              ("main", "main job (credit, 2 parties, Paillier 2048, depth 5)", MAIN, args.repeat)):
                if repeat:
                    runs[job] = alternate(rt, name, params, 10, repeat, train, test)
                    print_alternating(name, 10, runs[job])
        finally:
            rt.shutdown()
    if cost:
        print_seal_cost(cost, {"main": args.capture_trees, "plain": 10}, runs)


if __name__ == "__main__":
    main()
