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
    assert data_converter(None).payload_codec is None
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
    assert "raise ApplicationError" in str(back.failure.stack_trace if back.failure else "")


@pytest.mark.parametrize("token", [None, "the-cluster-token"])
def test_a_workflows_ending_failure_keeps_its_reason_and_no_stack_trace(
        token: str | None) -> None:
    """An experiment, trial or task that ended in ERROR fails its workflow with the reason as
    the message: a stack trace would show only Epochal's own code. Other failures keep it."""
    from temporalio.api.failure.v1 import Failure
    from temporalio.exceptions import ApplicationError

    from workflows.temporal_status import end_failed

    converter = data_converter(token)
    for kind in ("ExperimentError", "TrialError", "TaskError", "S3Error"):
        try:
            if kind == "S3Error":
                raise ApplicationError("cannot open the bucket", type=kind)
            end_failed("trial 3 ended in ERROR: run 2 failed: exit code 1", kind)
        except ApplicationError as err:
            error = err
        failure = Failure()
        asyncio.run(converter.encode_failure(error, failure))
        back = asyncio.run(converter.decode_failure(failure))
        assert isinstance(back, ApplicationError) and back.type == kind
        assert back.failure is not None
        if kind == "S3Error":
            assert back.failure.stack_trace != ""
            continue
        assert back.message == "trial 3 ended in ERROR: run 2 failed: exit code 1"
        assert back.failure.stack_trace == ""
        assert back.non_retryable
