"""``federation.yaml``: who takes part, where each party's gateway listens, which certificate name it
presents. Every party runs with the same file; nothing in it is secret.

.. code-block:: yaml

    parties:
      bank: {gateway: "bank.example.org:50051"}
      shop: {gateway: "10.0.0.7:50051", certificate_name: shop}   # certificate_name: the party's name by default

Example
-------
>>> fed = Federation.from_dict({"parties": {"bank": {"gateway": "127.0.0.1:50051"},
...                                         "shop": {"gateway": "127.0.0.1:50052"}}})
>>> fed.names, fed.party("shop").address
(['bank', 'shop'], '127.0.0.1:50052')
>>> Federation.from_dict({"parties": {"bank": {"gateway": "127.0.0.1"}}})
Traceback (most recent call last):
...
ray_vfl.errors.ConfigError: federation file: party 'bank': gateway '127.0.0.1' is not HOST:PORT (e.g. 'bank.example.org:50051')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ...errors import ConfigError
from .certs import PARTY_NAME

__all__ = ["Federation", "PartyEndpoint"]

_PARTY_KEYS = {"gateway", "certificate_name"}


@dataclass(frozen=True)
class PartyEndpoint:
    """One party of a federation: its name, its gateway's host and port, the name its certificate bears."""

    name: str
    host: str
    port: int
    certificate_name: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Federation:
    """The parties of ``federation.yaml`` (in the file's order)."""

    parties: tuple[PartyEndpoint, ...]

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parties]

    def party(self, name: str) -> PartyEndpoint:
        for p in self.parties:
            if p.name == name:
                return p
        raise ConfigError(f"party {name!r} is not in the federation file; its parties are {self.names}")

    @classmethod
    def from_yaml(cls, path: str) -> "Federation":
        import yaml

        try:
            with open(path, encoding="utf-8") as fh:
                content = yaml.safe_load(fh)
        except FileNotFoundError:
            raise ConfigError(f"federation file {path!r} does not exist; pass the federation.yaml every party runs "
                              "with") from None
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"federation file {path!r} cannot be read as YAML: {exc}") from None
        return cls.from_dict(content)

    @classmethod
    def from_dict(cls, content: Any) -> "Federation":
        def bad(what: str) -> ConfigError:
            return ConfigError(f"federation file: {what}")

        if not isinstance(content, Mapping) or set(content) - {"parties"} or not isinstance(content.get("parties"), Mapping):
            raise bad("it must hold one key, 'parties', mapping each party's name to {gateway: HOST:PORT}")
        parties, seen = [], {}
        for name, entry in content["parties"].items():
            if not isinstance(name, str) or not PARTY_NAME.match(name):
                raise bad(f"party name {name!r} must be lower-case letters, digits and '-', starting with a letter")
            if not isinstance(entry, Mapping):
                raise bad(f"party {name!r}: give {{gateway: HOST:PORT}}, not {entry!r}")
            unknown = sorted(set(entry) - _PARTY_KEYS)
            if unknown:
                raise bad(f"party {name!r}: unknown key(s) {unknown}; a party takes {sorted(_PARTY_KEYS)}")
            gateway = entry.get("gateway")
            host, _, port = str(gateway).rpartition(":") if isinstance(gateway, str) else ("", "", "")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise bad(f"party {name!r}: gateway {gateway!r} is not HOST:PORT (e.g. 'bank.example.org:50051')")
            address = f"{host}:{int(port)}"
            if address in seen:
                raise bad(f"parties {seen[address]!r} and {name!r} both name gateway {address}; each party has its own")
            seen[address] = name
            cert_name = entry.get("certificate_name", name)
            if not isinstance(cert_name, str) or not PARTY_NAME.match(cert_name):
                raise bad(f"party {name!r}: certificate_name {cert_name!r} must be a DNS label (lower-case letters, "
                          "digits, '-')")
            parties.append(PartyEndpoint(name, host, int(port), cert_name))
        if len(parties) < 2:
            raise bad(f"a federation needs at least 2 parties, got {len(parties)}")
        names = [p.certificate_name for p in parties]
        if len(set(names)) != len(names):
            raise bad(f"two parties present the same certificate name: {names}")
        return cls(tuple(parties))
