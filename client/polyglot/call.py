#!/usr/bin/python3
"""Calls ratelimitd from Python on both of its gRPC APIs, ratelimit.v1 and
Envoy's envoy.service.ratelimit.v3, and prints each decision as one line of
JSON for polyglot_test.go to check.

Usage: call.py TARGET DESCRIPTOR_SET

Needs only Debian's python3-grpcio and python3-protobuf: no generated code.
The message classes are made at run time from DESCRIPTOR_SET, a serialized
google.protobuf.FileDescriptorSet holding both APIs' files and everything
they import, dependencies first.

The calls assume a fresh daemon serving the default policy (domain
"default": global, per-endpoint and per-user-per-endpoint token buckets).
"""

import json
import sys

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def load(path):
    """Returns a function from a message's full name to its class."""
    with open(path, "rb") as f:
        files = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:  # each file after the files it imports
        pool.Add(file)
    factory = None if hasattr(message_factory, "GetMessageClass") else message_factory.MessageFactory(pool)

    def message(name):
        desc = pool.FindMessageTypeByName(name)
        return message_factory.GetMessageClass(desc) if factory is None else factory.GetPrototype(desc)

    def enum_name(enum, number):
        return pool.FindEnumTypeByName(enum).values_by_number[number].name

    return message, enum_name


def millis(duration):
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def main(target, descriptor_set):
    message, enum_name = load(descriptor_set)
    channel = grpc.insecure_channel(target)
    out = []

    def call(name, method, request, decode):
        try:
            response = method(request, timeout=10)
        except grpc.RpcError as e:
            out.append({"call": name, "error": e.code().name + ": " + e.details()})
            return
        out.append(dict(call=name, **decode(response)))

    # ratelimit.v1: the project's own API.
    Request = message("ratelimit.v1.ShouldRateLimitRequest")
    Response = message("ratelimit.v1.ShouldRateLimitResponse")
    Descriptor = message("ratelimit.v1.Descriptor")
    Entry = message("ratelimit.v1.Entry")
    Limit = message("ratelimit.v1.Limit")
    Duration = message("google.protobuf.Duration")
    should_rate_limit = channel.unary_unary(
        "/ratelimit.v1.RateLimitService/ShouldRateLimit",
        request_serializer=Request.SerializeToString,
        response_deserializer=Response.FromString,
    )

    def v1_descriptor(*entries, **fields):
        return Descriptor(entries=[Entry(key=k, value=v) for k, v in entries], **fields)

    def v1_decode(r):
        # most_restrictive names the status that decided: 1 + its index, 0 for none.
        most = r.statuses[r.most_restrictive - 1].rule.name if r.most_restrictive else ""
        return {
            "code": enum_name("ratelimit.v1.Code", r.overall_code),
            "policy": most,
            "retry_after_ms": millis(r.retry_after) if r.HasField("retry_after") else None,
            "statuses": [
                {"code": enum_name("ratelimit.v1.Code", s.code), "rule": s.rule.name, "remaining": s.remaining}
                for s in r.statuses
            ],
        }

    global_ = ("generic_key", "global")
    orders = ("path", "/orders")
    alice = [orders, ("user", "alice")]
    three_tiers = [v1_descriptor(global_), v1_descriptor(orders), v1_descriptor(*alice)]

    call("v1 first", should_rate_limit, Request(domain="default", descriptors=three_tiers), v1_decode)
    call("v1 spend", should_rate_limit,
         Request(domain="default", descriptors=[v1_descriptor(*alice, hits=799)]), v1_decode)
    call("v1 denied", should_rate_limit, Request(domain="default", descriptors=three_tiers), v1_decode)
    call("v1 peek", should_rate_limit,
         Request(domain="default", descriptors=[v1_descriptor(*alice, hits=0)]), v1_decode)
    tenant = v1_descriptor(("tenant", "acme"), limit=Limit(
        algorithm="ALGORITHM_TOKEN_BUCKET",
        requests=2, period=Duration(seconds=60), name="tenant-quota"))
    call("v1 inline", should_rate_limit, Request(domain="default", descriptors=[tenant], hits=2), v1_decode)
    call("v1 inline denied", should_rate_limit, Request(domain="default", descriptors=[tenant]), v1_decode)
    call("v1 invalid", should_rate_limit, Request(domain="", descriptors=three_tiers), v1_decode)

    # Envoy's v3 API, as an Envoy proxy calls it.
    V3Request = message("envoy.service.ratelimit.v3.RateLimitRequest")
    V3Response = message("envoy.service.ratelimit.v3.RateLimitResponse")
    V3Descriptor = message("envoy.extensions.common.ratelimit.v3.RateLimitDescriptor")
    V3Entry = message("envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry")
    v3_should_rate_limit = channel.unary_unary(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        request_serializer=V3Request.SerializeToString,
        response_deserializer=V3Response.FromString,
    )

    def v3_descriptor(*entries):
        return V3Descriptor(entries=[V3Entry(key=k, value=v) for k, v in entries])

    def v3_decode(r):
        code = "envoy.service.ratelimit.v3.RateLimitResponse.Code"
        return {
            "code": enum_name(code, r.overall_code),
            "retry_after_ms": None,
            "statuses": [
                {"code": enum_name(code, s.code), "rule": s.current_limit.name, "remaining": s.limit_remaining,
                 "reset_ms": millis(s.duration_until_reset)}
                for s in r.statuses
            ],
        }

    bob = [orders, ("user", "bob")]
    v3_tiers = [v3_descriptor(global_), v3_descriptor(orders), v3_descriptor(*bob)]
    call("v3 first", v3_should_rate_limit, V3Request(domain="default", descriptors=v3_tiers), v3_decode)
    call("v3 spend", v3_should_rate_limit,
         V3Request(domain="default", descriptors=[v3_descriptor(*bob)], hits_addend=799), v3_decode)
    call("v3 denied", v3_should_rate_limit, V3Request(domain="default", descriptors=v3_tiers), v3_decode)
    call("v3 invalid", v3_should_rate_limit, V3Request(domain="", descriptors=v3_tiers), v3_decode)

    for line in out:
        print(json.dumps(line))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
