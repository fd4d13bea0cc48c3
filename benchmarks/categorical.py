"""Native categorical splits on UCI bank marketing: federated SecureBoost against xgboost, in one run.

    python benchmarks/categorical.py                        # bank (45,211 rows), 2 parties, Paillier 2048
    python benchmarks/categorical.py --backend plain --rows 10000

Four models on the same 80/20 split (seed 0), 10 trees of depth 5, 32 bins, lr 0.3, lambda 1:
SecureBoost with ``enable_categorical`` (category sets chosen with the label party, kept at the
column's party) and with the ordinal codes, and xgboost ``hist`` with ``enable_categorical`` and on
the same ordinal codes. Columns: test AUC, seconds of training (trees only), MB exchanged. Results go
to ``benchmarks/results/categorical.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time


from ray_vfl import Runtime, SecureBoostClassifier, vertical_split
from ray_vfl.data.bundled import load_named
from ray_vfl.metrics import auc
from ray_vfl.trees.callbacks import TreeTimer


def xgboost_auc(frame, label, cats, train_ids, test_ids, native: bool, args) -> float:
    import xgboost as xgb

    x = frame.drop(columns=[label])
    if native:
        x = x.astype({c: "category" for c in cats})
    else:  # the codes a party gives its categories when they are not split natively (sorted values)
        x = x.assign(**{c: x[c].map({v: i for i, v in enumerate(sorted(x[c].dropna().unique(), key=str))}) for c in cats})
    params = {"objective": "binary:logistic", "tree_method": "hist", "max_depth": args.depth, "eta": 0.3, "lambda": 1.0,
              "max_bin": args.bins, "min_child_weight": 1.0, "max_cat_to_onehot": 4, "seed": 0, "nthread": 2}
    y = frame[label].to_numpy()
    booster = xgb.train(params, xgb.DMatrix(x.iloc[train_ids], label=y[train_ids], enable_categorical=native), args.trees)
    return auc(y[test_ids], booster.predict(xgb.DMatrix(x.iloc[test_ids], enable_categorical=native)))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=None, help="a random sample of bank's rows (default: all 45,211)")
    p.add_argument("--trees", type=int, default=10)
    p.add_argument("--depth", type=int, default=5)
    p.add_argument("--bins", type=int, default=32)
    p.add_argument("--backend", default="paillier")
    p.add_argument("--key-bits", type=int, default=2048)
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results", "categorical.json"))
    args = p.parse_args(argv)
    frame, label, cats, _ = load_named("bank")
    if args.rows:
        frame = frame.sample(n=args.rows, random_state=0).reset_index(drop=True)
    data = vertical_split(frame, 2, label=label, categorical=cats, seed=0)
    train, test = data.train_test_split(0.2, seed=0)
    runtime = Runtime()
    rows = []
    for native in (True, False):
        timer = TreeTimer()
        clf = SecureBoostClassifier(n_estimators=args.trees, max_depth=args.depth, max_bin=args.bins,
                                    backend=args.backend, key_bits=args.key_bits, allow_weak_keys=args.key_bits < 2048,
                                    enable_categorical=native, callbacks=[timer], runtime=runtime).fit(train)
        score = auc(test.label, clf.predict_proba(test)[:, 1])
        mb = sum(r.nbytes for r in clf.comm_stats_.records) / 1e6
        rows.append({"model": f"SecureBoost {'native categorical' if native else 'ordinal codes'}", "auc": round(score, 4),
                     "train_s": round(timer.seconds, 1), "mb": round(mb, 1)})
        print(rows[-1], flush=True)
    for native in (True, False):
        start = time.perf_counter()
        score = xgboost_auc(frame, label, cats, train.ids, test.ids, native, args)
        rows.append({"model": f"xgboost {'enable_categorical' if native else 'ordinal codes'}", "auc": round(score, 4),
                     "train_s": round(time.perf_counter() - start, 2), "mb": 0.0})
        print(rows[-1], flush=True)
    setting = (f"bank {'all rows' if not args.rows else f'{args.rows} rows'} ({train.n_rows} train / {test.n_rows} test), "
               f"2 parties, {args.backend} {args.key_bits}, {args.trees} trees of depth {args.depth}, {args.bins} bins")
    print(f"\n{setting}\n\n| model | test AUC | train s | MB |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['auc']:.4f} | {r['train_s']} | {r['mb']} |")
    gap = rows[0]["auc"] - rows[2]["auc"]
    print(f"\nnative categorical: ours - xgboost = {gap:+.4f} AUC (target: within 0.002)")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump({"setting": setting, "rows": rows, "auc_gap": gap}, fh, indent=1)


if __name__ == "__main__":
    main()
