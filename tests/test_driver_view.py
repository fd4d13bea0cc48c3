"""What the driver holds: ciphertext only.

The driver coordinates the parties' actors; Ray hands it every actor result it asked for, inline when
small (messages included: the driver owns the references it passes on), and lets it fetch any reference
it owns from the object store. A recorder wraps the driver's Ray deserializer (everything the driver
builds from bytes Ray hands it) and keeps every reference the driver's calls return; after SecureBoost
(training and prediction: margins come back sealed to a key the caller made for the call),
PIVODL and PSI have run, it fetches every one of those references too, so it holds everything the
driver could read. In that haul: every message is sealed (its wire is no payload, and no key of this
process opens it), and no label, feature value, bin of a feature, gradient or raw ID appears in any
byte of it. With sealing switched off (the overhead benchmark's switch), the same recorder finds
payloads and feature bins: the check has teeth.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import uuid

import numpy as np
import ray

from ray_vfl import ProtocolError, SecureBoostClassifier, vertical_split
from ray_vfl.data.binning import PartyBinner
from ray_vfl.data.bundled import load_named
from ray_vfl.pivodl import PIVODLConfig
from ray_vfl.pivodl import train as pivodl_train
from ray_vfl.psi.protocol import private_set_intersection
from ray_vfl.runtime.codec import decode
from ray_vfl.runtime.comm import Message
from ray_vfl.runtime.seal import SEAL_MAGIC, Seal

N_ROWS, MAX_BIN = 600, 8


@contextlib.contextmanager
def driver_recorder():
    """Record what the driver process builds from Ray's bytes, and the references its calls return."""
    from ray._private.serialization import SerializationContext
    from ray.actor import ActorMethod
    from ray.remote_function import RemoteFunction

    built, refs = [], []
    originals = (SerializationContext.deserialize_objects, ActorMethod._remote, RemoteFunction._remote)

    def deserialize_objects(self, *args, **kwargs):
        out = originals[0](self, *args, **kwargs)
        built.extend(out)
        return out

    def actor_call(self, *args, **kwargs):
        out = originals[1](self, *args, **kwargs)
        refs.append(out)
        return out

    def task_call(self, *args, **kwargs):
        out = originals[2](self, *args, **kwargs)
        refs.append(out)
        return out

    SerializationContext.deserialize_objects = deserialize_objects
    ActorMethod._remote, RemoteFunction._remote = actor_call, task_call
    try:
        yield built, refs
    finally:
        SerializationContext.deserialize_objects, ActorMethod._remote, RemoteFunction._remote = originals


def _fetch_all(refs: list) -> None:
    """Fetch every reference the driver's calls returned (through the recording deserializer)."""
    flat = [r for out in refs for r in (out if isinstance(out, (list, tuple)) else [out]) if isinstance(r, ray.ObjectRef)]
    for ref in flat:
        with contextlib.suppress(Exception):  # a failed call's error is recorded as it is built
            ray.get(ref, timeout=60)


def _walk(obj, out: list, depth: int = 0) -> None:
    """Every object reachable from ``obj`` (containers, dataclasses, plain objects' attributes)."""
    if depth > 12:
        return
    out.append(obj)
    if isinstance(obj, (list, tuple, set, frozenset)):
        for v in obj:
            _walk(v, out, depth + 1)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _walk(k, out, depth + 1)
            _walk(v, out, depth + 1)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _walk(getattr(obj, f.name, None), out, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type) and type(obj).__module__.startswith("ray_vfl"):
        for v in vars(obj).values():
            _walk(v, out, depth + 1)


def _as_bytes(obj) -> bytes:
    try:
        return pickle.dumps(obj, protocol=5)
    except Exception:  # an actor handle, a lock: nothing of a party's data
        return repr(obj).encode()


def secrets_of(sb_train, pv_train, ids) -> dict[str, list[bytes]]:
    """Byte needles of every secret, in every form the protocols hold it: labels, feature values, the
    feature bins PIVODL sources send, SecureBoost's first gradients (base score 0.5), raw IDs."""
    y = sb_train.label
    needles = {"label": [y[:32].astype(np.float64).tobytes(), y[:64].astype(np.int64).tobytes(),
                         y[:64].astype(np.uint8).tobytes(), np.packbits(y[:256].astype(bool)).tobytes()],
               "feature": [], "bins": [], "gradient": [], "raw id": []}
    for data in (sb_train, pv_train):
        for p in data.party_names:
            values = data.features[p].to_numpy(dtype=np.float64)
            needles["feature"] += [np.ascontiguousarray(values[8:16, j]).tobytes() for j in range(values.shape[1])]
            needles["feature"] += [values[8:10].tobytes(), values[8:10].astype(np.float32).tobytes()]
    for p in pv_train.party_names:  # what p's source round sends q: p's bins at q's labelled rows
        bins = PartyBinner(MAX_BIN).fit_transform(pv_train.features[p], [], p)
        for q in pv_train.party_names:
            rows = np.flatnonzero(~np.isnan(pv_train.labels_of(q)))
            at = bins[rows]
            needles["bins"] += [at[4:10].tobytes(), np.ascontiguousarray(at[4:40, 0]).tobytes()]
    g = 0.5 - y.astype(np.float64)
    needles["gradient"] += [g[:32].tobytes(), np.column_stack([g, np.full_like(g, 0.25)])[:16].tobytes()]
    needles["raw id"] += [i.encode() for i in ids["party0"]]
    return needles


def run_protocols(runtime, secureboost: bool = True):
    """SecureBoost and PIVODL (plain backend: no encryption of their own) and PSI, small."""
    frame, label, _, _ = load_named("credit")
    frame = frame.iloc[:N_ROWS].reset_index(drop=True)
    sb_train = vertical_split(frame, 2, label=label, seed=0)
    if secureboost:
        SecureBoostClassifier(n_estimators=2, max_depth=3, max_bin=MAX_BIN, backend="plain", base_score=0.5,
                              runtime=runtime).fit(sb_train).predict_proba(sb_train)
    pv_train = vertical_split(frame, 2, label=label, label_owners={"party0": 0.5, "party1": 0.5}, seed=1)
    pivodl_train(runtime, pv_train, PIVODLConfig(n_trees=2, max_depth=2, max_bin=MAX_BIN, backend="plain"))
    universe = [f"cust-{uuid.uuid4().hex}" for _ in range(60)]
    ids = {"party0": universe[:40], "party1": universe[20:]}
    private_set_intersection(runtime, ids, workers=1)
    return sb_train, pv_train, ids


def what_the_driver_holds(runtime, secureboost: bool = True):
    with driver_recorder() as (built, refs):
        sb_train, pv_train, ids = run_protocols(runtime, secureboost)
        _fetch_all(refs)
    held: list = []
    for obj in built:
        _walk(obj, held)
    return held, secrets_of(sb_train, pv_train, ids)


def _opens(message: Message) -> bool:
    """Whether this process can read the message: as wire bytes, or with a key pair it holds."""
    try:
        decode(message.wire)
        return True
    except ProtocolError:
        pass
    for receiver in message.receivers:
        with contextlib.suppress(ProtocolError):
            Seal(receiver).unseal(message.kind, message.sender, message.receivers, message.tree, message.depth,
                                  message.wire)
            return True
    return False


def leaks(held: list, needles: dict[str, list[bytes]]) -> dict[str, list]:
    messages = [m for m in held if isinstance(m, Message)]
    found = {"messages held": len(messages),
             "unsealed": sorted({m.kind for m in messages if not m.wire.startswith(SEAL_MAGIC) or _opens(m)})}
    blobs = [_as_bytes(obj) for obj in held if not isinstance(obj, (int, float, str, bool, type(None)))]
    for what, forms in needles.items():
        found[what] = sorted({i for blob in blobs for i, n in enumerate(forms) if n in blob})
    return found


def test_the_driver_holds_ciphertext_only(runtime):
    held, needles = what_the_driver_holds(runtime)
    found = leaks(held, needles)
    kinds = {m.kind for m in held if isinstance(m, Message)}
    # the driver handled messages of every protocol: the recorder saw them
    assert found["messages held"] > 20 and {"public_key", "pivodl_candidate_request", "psi_points"} <= kinds
    # predictions too come back sealed, to a key the caller made for that call (issue 37, 3f)
    assert "margins" in kinds and all(m.receivers == ("caller",) for m in held if isinstance(m, Message) and m.kind == "margins")
    assert found == {"messages held": found["messages held"], "unsealed": [], "label": [], "feature": [],
                     "bins": [], "gradient": [], "raw id": []}


def test_without_seals_the_driver_reads_payloads(runtime):
    """The same recorder with sealing switched off (what the code did before): every payload is in the
    driver's hands (PIVODL and PSI suffice to show it). Before issue 37 (3a) PIVODL's sources also sent
    their feature bins to every client, which this recorder found; they now send no bins at all, only
    each receiver's own rows' memberships per candidate, which the recorder finds unsealed here."""
    runtime._seal_messages = False
    try:
        held, needles = what_the_driver_holds(runtime, secureboost=False)
    finally:
        runtime._seal_messages = True
    found = leaks(held, needles)
    assert {"pivodl_candidate_request", "pivodl_labelled_rows", "psi_points", "psi_result"} <= set(found["unsealed"])
