"""Server S as a Ray actor, and the link through which server C reaches it.

S holds the BCP master key and runs the two-server steps of :class:`~ray_vfl.crypto.two_server.server_s.ServerS`
on what C sends; it talks to C only. :class:`ActorLink` is C's ``link``: each ``ask(step, *payload)``
is one metered ``ssxgb_s_request`` message from C's actor to S's actor and one metered
``ssxgb_s_reply`` back (both through :meth:`~ray_vfl.runtime.comm.Mailbox.send`), so the bytes and
round trips between the servers show in the communication statistics like every other channel.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..crypto.two_server.bcp import BCPMasterKey, BCPParams, setup
from ..crypto.two_server.server_s import ServerS, TwoServerConfig
from ..errors import SecurityWarning
from ..runtime.actors import gather
from ..runtime.comm import Mailbox, Message
from ..runtime.party import PartyActor
from ..runtime.payload_shapes import describe
from .config import SSXGBConfig
from .costs import CostCounters
from .messages import S_STEPS

__all__ = ["ActorLink", "ServerSRole", "mask_moduli"]


def mask_moduli(step: str, args: tuple, config: TwoServerConfig, n: int, count: int) -> list[int | None]:
    """The modulus of the mask of each of the ``count`` arrays a request ``step(*args)`` makes S open:
    ``N`` for KeyProd / TransDec (``m + tau``), ``2^(b + kappa)`` for a Mult operand of declared bound
    ``b`` (C tells S each bound with the request), ``2^(l + kappa)`` for Trunc, none for LGT (what LGT's
    values show is in the view table)."""
    if step == "mult_step":
        bits = args[4] if len(args) > 4 and args[4] is not None else [config.value_bits] * count
        return [1 << (int(b) + config.kappa) for b in bits]
    if step == "trunc_step":
        return [1 << config.mask_bits] * count
    if step == "switch_key_step":
        return [n] * count
    return [None] * count


class ServerSRole(PartyActor, CostCounters):
    """Server S: BCP Setup, the master key, and the answers to C's masked requests.

    ``record_view=True`` keeps what S received (step names and payload shapes) and what it
    decrypted, each opened array with where it was opened and the range of its mask, for the view
    audit (:meth:`view`).
    """

    def __init__(self, name: str, config: SSXGBConfig, server_c: str, pool: Any = None,
                 record_view: bool = False) -> None:
        self.reset(name, config, server_c, pool, record_view)

    def reset(self, name: str, config: SSXGBConfig, server_c: str, pool: Any = None, record_view: bool = False) -> None:
        self._start_party(name)
        self.config, self.server_c, self.record_view, self.pool = config, server_c, record_view, pool
        self.server: ServerS | None = None
        self.received: list[tuple[str, Any]] = []
        self.opened: list[tuple[int, int, str, list[int], int | None]] = []

    def setup(self) -> tuple:
        """BCP Setup (the master key stays here); the public parameters ``(N, g)`` go to C."""
        with warnings.catch_warnings():  # the driver warns about a weak key once, where the user sees it
            warnings.simplefilter("ignore", SecurityWarning)
            params, mk = setup(self.config.key_bits, allow_weak=self.config.allow_weak_keys)
        self.server = ServerS(mk, TwoServerConfig(self.config.value_bits, self.config.kappa),
                              frac_bits=self.config.frac_bits, record_view=self.record_view, pool=self.pool)
        return None, self.mailbox.send("ssxgb_params", [self.server_c], {"n": int(params.n), "g": int(params.g)})

    def answer(self, message: Message) -> Message:
        """One two-server step: open C's request, run it, send the reply back to C."""
        p = self.mailbox.open(message, "ssxgb_s_request", None, [self.server_c])
        if self.record_view:
            self.received.append((p["step"], describe(p["args"])))
        before = len(self.server.view) if self.server else 0
        reply = getattr(ServerS, p["step"])(self.server, *p["args"])
        if self.record_view:
            self._tag(p["step"], p["args"], message, self.server.view[before:])
        return self.mailbox.send("ssxgb_s_reply", [self.server_c], reply, message.tree, message.depth)

    def _tag(self, step: str, args: tuple, message: Message, opened: list[tuple[str, list[int]]]) -> None:
        """Each array this request opened, with the message's tree and depth and its mask's modulus."""
        moduli = mask_moduli(step, args, self.server.config, int(self.server._mk.params.n), len(opened))
        for (name, vals), modulus in zip(opened, moduli):
            self.opened.append((message.tree, message.depth, name, [int(v) for v in vals], modulus))

    # -- saved part (on S's own machine: it holds the master key) ---------------------------------------
    def model_part(self) -> dict[str, Any]:
        mk = self.server._mk
        return {"party": self.name, "params": [str(mk.params.n), str(mk.params.g)], "p1": str(mk.p1),
                "q1": str(mk.q1), "keys": [str(k.h) for k in self.server.keys.values()]}

    def restore(self, part: dict[str, Any]) -> None:
        params = BCPParams(int(part["params"][0]), int(part["params"][1]))
        mk = BCPMasterKey(params, int(part["p1"]), int(part["q1"]))
        self.server = ServerS(mk, TwoServerConfig(self.config.value_bits, self.config.kappa),
                              frac_bits=self.config.frac_bits, record_view=self.record_view, pool=self.pool)
        self.server.register_step([int(h) for h in part["keys"]])

    def resume_training(self, state: dict[str, Any]) -> None:
        self.restore(state)

    def view(self) -> dict[str, Any]:
        """What S received (step, payload shape) and decrypted (step, integers), if recorded; ``opened``:
        the decrypted arrays as ``(tree, depth, step, integers, modulus of the mask)``, in order."""
        return {"received": list(self.received), "decrypted": list(self.server.view) if self.server else [],
                "opened": list(self.opened)}


class ActorLink:
    """C's link to S's actor: ``ask(step, *payload)`` is one metered round trip (see the module docstring).

    Attributes
    ----------
    round_trips : int
    replies : list
        S's replies, if ``record``.
    tree, depth : int
        Where the protocol is (recorded with each message).
    """

    def __init__(self, mailbox: Mailbox, server_s: str, handle: Any, timeout_s: float, record: bool = False) -> None:
        self.mailbox, self.server_s, self.handle, self.timeout_s = mailbox, server_s, handle, timeout_s
        self.record, self.replies = record, []  # record: keep S's replies (C's view audit)
        self.round_trips = 0
        self.tree, self.depth = -1, -1

    def ask(self, step: Any, *payload: Any) -> Any:
        name = step.__name__
        if name not in S_STEPS:
            raise ValueError(f"{name} is not a server S step")
        request = self.mailbox.send("ssxgb_s_request", [self.server_s], {"step": name, "args": payload},
                                    self.tree, self.depth)
        (reply,) = gather([(self.server_s, self.handle.answer.remote(request))], f"two-server {name}", self.timeout_s)
        self.round_trips += 1
        got = self.mailbox.open(reply, "ssxgb_s_reply", None, [self.server_s])
        if self.record:
            self.replies.append(list(got) if isinstance(got, (list, tuple)) else [got])
        return got
