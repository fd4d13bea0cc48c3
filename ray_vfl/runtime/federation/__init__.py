"""Across organisations: each party on its own Ray cluster, joined by gateways over mutual TLS.

:mod:`.certs` makes a test certificate authority and one certificate per party (production uses the
organisations' own PKI); :mod:`.federation_file` reads ``federation.yaml`` (each party's name, gateway
address and certificate name); :mod:`.gateway` is a party's gRPC endpoint: mutual TLS, the caller
named by its certificate (never by a field it fills in), an allow-list of the methods a peer may call,
every request and reply on the typed wire (:mod:`ray_vfl.runtime.codec`, never pickle); :mod:`.stubs`
gives another party's roles the surface of Ray actor handles, and dispatches allowed calls to a party's actors;
:mod:`.roles` is the control plane (the role kinds a party serves, their allow-lists, the typed records a
request to start one carries); :mod:`.serving` is a party serving its roles under its policy
(``python -m ray_vfl.serve``); :mod:`.coordinator` is the coordinating party's :class:`FederatedRuntime`,
with the surface of :class:`~ray_vfl.runtime.actors.Runtime`.
"""
