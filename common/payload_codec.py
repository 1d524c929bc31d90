"""Every payload the cluster gives Temporal is encrypted, so no history holds a secret in clear.

Workflow and activity inputs carry experiment configs (S3 keys, the environment variables a
user gives their trials), and Temporal's frontend and UI authenticate nobody unless set up to
(docs/SECURITY.md): anyone who reads a history would read them. The master and the agents (the
holders of the cluster token) encode every payload they send (inputs, results, signals,
queries, and the message and stack trace of each failure, which may quote them) with
AES-256-GCM under a key derived from the cluster token, and decode what they receive;
search attributes and the experiment's memo (`in_clear`), which hold no secret,
stay readable for Temporal's queries and UI. A payload that is not encrypted (a history
recorded before, a test's client) is decoded as it is, so old histories still replay.
Temporal's UI shows the other payloads as encrypted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import temporalio.converter
import temporalio.exceptions
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from temporalio.api.common.v1 import Payload

ENCODING = b"binary/encrypted"
KEY_ID = "encryption-key-id"
_NONCE_BYTES = 12
_KDF_INFO = b"epochal temporal payloads v1"


def payload_key(cluster_token: str) -> bytes:
    """The AES-256 key of the cluster's payloads, derived from its token (HKDF-SHA256)."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=_KDF_INFO).derive(cluster_token.encode())


class EncryptionCodec(temporalio.converter.PayloadCodec):
    """AES-256-GCM over each whole serialized payload (its metadata included)."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)
        self.key_id = hashlib.sha256(key).hexdigest()[:16].encode()

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encrypt(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decrypt(p) for p in payloads]

    def encrypt(self, payload: Payload) -> Payload:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, payload.SerializeToString(), None)
        return Payload(metadata={"encoding": ENCODING, KEY_ID: self.key_id},
                       data=nonce + sealed)

    def decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # recorded before payloads were encrypted, or by a plain client
        if payload.metadata.get(KEY_ID) != self.key_id:
            raise ValueError("a payload encrypted under another cluster token (key id "
                             f"{payload.metadata.get(KEY_ID, b'?').decode()}): was the "
                             "cluster token changed while workflows ran?")
        data = payload.data
        plain = Payload()
        plain.ParseFromString(self._aead.decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:],
                                                 None))
        return plain


def in_clear(memo: Mapping[str, Any]) -> dict[str, Payload]:
    """A memo Temporal's UI shows as it is: values made payloads here are passed on without
    the codec. For what is never secret (an experiment's name, searcher, pool)."""
    convert = temporalio.converter.DataConverter.default.payload_converter.to_payloads
    return {key: convert([value])[0] for key, value in memo.items()}


# The failures a workflow ends with to say it ended in ERROR (workflows/temporal_status.py): their
# message is the reason, and a stack trace would show only Epochal's own code.
ENDING_FAILURES = frozenset({"ExperimentError", "TrialError", "TaskError"})


class _EndingsWithoutTraceback(temporalio.converter.DefaultFailureConverter):
    def to_failure(self, exception: BaseException,
                   payload_converter: temporalio.converter.PayloadConverter,
                   failure: Any) -> None:
        if (isinstance(exception, temporalio.exceptions.ApplicationError)
                and exception.type in ENDING_FAILURES):
            exception = exception.with_traceback(None)
        super().to_failure(exception, payload_converter, failure)


class EndingFailureConverter(_EndingsWithoutTraceback):
    """Temporal's default, but an ending's failure carries no stack trace."""


class EncodedEndingFailureConverter(
        _EndingsWithoutTraceback,
        temporalio.converter.DefaultFailureConverterWithEncodedAttributes):
    """The same, with every failure's message and stack trace encoded as a payload."""


def data_converter(cluster_token: str | None) -> temporalio.converter.DataConverter:
    """The converter of the master's and the agents' clients: encrypting where there is a
    cluster token to derive the key from, else Temporal's default codec. A failure's message
    and stack trace travel as a payload (its "encoded attributes"), so they are encrypted too;
    the history shows "Encoded failure" in their place, and Temporal's UI the message through
    the codec endpoint (api/routes/temporal_codec.py)."""
    default = temporalio.converter.DataConverter.default
    if not cluster_token:
        return dataclasses.replace(default, failure_converter_class=EndingFailureConverter)
    return dataclasses.replace(
        default, payload_codec=EncryptionCodec(payload_key(cluster_token)),
        failure_converter_class=EncodedEndingFailureConverter)
