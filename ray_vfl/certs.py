"""``python -m ray_vfl.certs --out certs/ bank shop``: a test certificate authority and one certificate
per party for the cross-organisation gateways (:mod:`ray_vfl.runtime.federation.certs`). For trials
and tests; in production each organisation's certificate comes from a PKI both sides trust."""

from __future__ import annotations

import argparse
import sys

from .errors import VFLError
from .runtime.federation.certs import write_test_certificates


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ray_vfl.certs", description=__doc__.splitlines()[0])
    p.add_argument("parties", nargs="+", help="the parties' names, as in federation.yaml")
    p.add_argument("--out", default="certs", help="folder for ca.pem, <party>.pem and <party>.key")
    args = p.parse_args(argv)
    try:
        paths = write_test_certificates(args.out, args.parties)
    except VFLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for party, files in paths.items():
        print(f"{party}: {files['cert']} {files['key']} (trusts {files['ca']})")
    print("each party keeps its .key; every party gets ca.pem; production: use your organisations' own PKI")
    return 0


if __name__ == "__main__":
    sys.exit(main())
