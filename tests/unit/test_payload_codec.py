"""The cluster's payload encryption (common/payload_codec.py)."""

from __future__ import annotations

import asyncio

import pytest
import temporalio.converter

from common.payload_codec import ENCODING, EncryptionCodec, data_converter, payload_key


def test_payloads_are_sealed_and_open_only_under_the_same_token() -> None:
    converter = data_converter("the-cluster-token")
    config = {"checkpoint_storage": {"secret_key": "s3cr3t-key"}, "env": "HF_TOKEN=hf_x"}
    [sealed] = asyncio.run(converter.encode([config]))
    assert sealed.metadata["encoding"] == ENCODING
    assert b"s3cr3t-key" not in sealed.SerializeToString()
    assert asyncio.run(converter.decode([sealed], [dict])) == [config]
    other = data_converter("another-token")
    with pytest.raises(Exception, match="another cluster token"):
        asyncio.run(other.decode([sealed], [dict]))
    # Tampered: refused, not read.
    sealed.data = sealed.data[:-1] + bytes([sealed.data[-1] ^ 1])
    with pytest.raises(Exception):  # noqa: B017 (cryptography's InvalidTag)
        asyncio.run(converter.decode([sealed], [dict]))


def test_a_plain_payload_of_an_older_history_is_read_as_it_is() -> None:
    [plain] = asyncio.run(temporalio.converter.DataConverter.default.encode(["old input"]))
    codec = EncryptionCodec(payload_key("the-cluster-token"))
    assert asyncio.run(codec.decode([plain])) == [plain]
    assert asyncio.run(data_converter("the-cluster-token").decode([plain], [str])) == [
        "old input"]


def test_no_token_no_encryption() -> None:
    assert data_converter(None) is temporalio.converter.DataConverter.default
    nonces = {asyncio.run(data_converter("t").encode(["x"]))[0].data[:12] for _ in range(5)}
    assert len(nonces) == 5  # a fresh nonce per payload


def test_a_memo_given_in_clear_passes_the_codec_as_it_is() -> None:
    from temporalio.api.common.v1 import Memo

    from common.payload_codec import in_clear

    memo = Memo()
    converter = data_converter("the-cluster-token")
    asyncio.run(converter._encode_memo_existing(in_clear({"name": "mnist"}), memo))
    assert memo.fields["name"].metadata["encoding"] == b"json/plain"
    assert memo.fields["name"].data == b'"mnist"'


def test_a_failures_message_and_stack_trace_are_sealed_and_read_back() -> None:
    from temporalio.api.failure.v1 import Failure
    from temporalio.exceptions import ApplicationError

    converter = data_converter("the-cluster-token")
    try:
        raise ApplicationError("cannot open s3://bucket with key s3cr3t-key", type="S3Error")
    except ApplicationError as err:
        error = err
    failure = Failure()
    asyncio.run(converter.encode_failure(error, failure))
    assert b"s3cr3t-key" not in failure.SerializeToString()
    assert failure.message == "Encoded failure"
    assert failure.encoded_attributes.metadata["encoding"] == ENCODING
    back = asyncio.run(converter.decode_failure(failure))
    assert isinstance(back, ApplicationError) and back.type == "S3Error"
    assert back.message == "cannot open s3://bucket with key s3cr3t-key"
