"""Schemathesis hooks: SIE bodies and answers in msgpack, as the SIE face sends and reads them,
so generated msgpack requests are sent and msgpack answers are checked against the document."""

import msgpack
import schemathesis


def _fits(value):
    """msgpack integers have 64 bits; a larger generated integer is sent as a float."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return float(value)
    if isinstance(value, dict):
        return {k: _fits(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fits(v) for v in value]
    return value


@schemathesis.serializer("application/msgpack")
def to_msgpack(ctx, value):
    return msgpack.packb(_fits(value), use_bin_type=True)


@schemathesis.deserializer("application/msgpack")
def from_msgpack(ctx, response):
    return msgpack.unpackb(response.content, raw=False)
