"""``python -m ray_vfl.serve``: one party serves its roles to the other organisations of a federation.

    python -m ray_vfl.serve --federation federation.yaml --party shop --data shop.parquet --id-column cid \\
        --cert certs/shop.pem --key certs/shop.key --ca certs/ca.pem

The party's own Ray runs its roles (a local Ray, or its cluster under ``ray job submit``); its gateway
listens on its address in ``federation.yaml`` over mutual TLS; the coordinating party's job
(``jobs/train.py --federation ...``) asks it to start the roles of :data:`ROLE_KINDS` on the data it serves,
named by file name only (:mod:`ray_vfl.runtime.federation.serving`; a PIVODL client's messages for the other
clients go straight to their gateways: :mod:`~ray_vfl.runtime.federation.relay`). Ctrl-C or SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from .data.store import TableRef
from .errors import VFLError
from .runtime.federation.roles import ROLE_KINDS
from .runtime.federation.serving import serve


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ray_vfl.serve", description=__doc__.splitlines()[0])
    p.add_argument("--federation", required=True, help="federation.yaml: every party's name and gateway address")
    p.add_argument("--party", required=True, help="this party's name in the federation file")
    p.add_argument("--data", required=True, nargs="+", help="the CSV/Parquet file(s) this party serves; the other "
                   "parties name them by file name")
    p.add_argument("--id-column", default="id", help="the served tables' ID column (for PSI)")
    p.add_argument("--categorical", default="", help="comma-separated categorical columns of the served tables")
    p.add_argument("--cert", required=True, help="this party's certificate (PEM)")
    p.add_argument("--key", required=True, help="this party's private key (PEM)")
    p.add_argument("--ca", required=True, help="the federation's CA certificate (PEM)")
    p.add_argument("--listen", default=None, help="HOST:PORT to listen on (default: the party's gateway in the file)")
    p.add_argument("--roles", default=",".join(ROLE_KINDS), help=f"role kinds served, of {list(ROLE_KINDS)}")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray started here (default: all)")
    p.add_argument("--timeout", type=float, default=600.0, help="longest wait for one call, seconds")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve(args.federation, args.party, args.data, args.id_column,
              {"cert": args.cert, "key": args.key, "ca": args.ca}, listen=args.listen,
              kinds=tuple(k.strip() for k in args.roles.split(",") if k.strip()), num_cpus=args.num_cpus,
              categorical=tuple(c.strip() for c in args.categorical.split(",") if c.strip()),
              timeout_s=args.timeout, stop=stop, make_table=TableRef)
    except VFLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
