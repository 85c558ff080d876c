#!/usr/bin/python3
"""Calls ratelimitd's JSON API over HTTP from Python's standard library alone
(urllib, json: no gRPC, no protobuf, no generated code) and prints each answer
as one line of JSON for polyglot_test.go to check.

Usage: call_http.py BASE_URL      (e.g. http://127.0.0.1:8080)

The calls assume a fresh daemon serving the default policy (domain
"default": global, per-endpoint and per-user-per-endpoint token buckets).
"""

import json
import sys
import urllib.error
import urllib.request


def post(url, body):
    """POSTs body as JSON (Content-Type application/json, which /json too
    requires); returns the HTTP status and the decoded answer. urllib
    raises HTTPError for a status of 400 or more: its body is the answer
    all the same."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def descriptor(*entries, **fields):
    return dict(entries=[{"key": k, "value": v} for k, v in entries], **fields)


def main(base):
    out = []

    def v1(name, body):
        status, answer = post(base + "/ratelimit.v1.RateLimitService/ShouldRateLimit", body)
        if "code" in answer:  # an error
            out.append({"call": name, "http": status, "error": answer["code"] + ": " + answer["message"]})
            return
        out.append({
            "call": name,
            "http": status,
            "code": answer["overallCode"],
            "retry_after": answer.get("retryAfter"),
            # 64-bit integers are JSON strings in the proto3 JSON mapping.
            "statuses": [{"code": s["code"], "rule": s["rule"]["name"], "remaining": int(s["remaining"])}
                         for s in answer["statuses"]],
        })

    def v3(name, path, body):
        status, answer = post(base + path, body)
        out.append({
            "call": name,
            "http": status,
            "code": answer["overallCode"],
            "statuses": [{"code": s["code"], "rule": s["currentLimit"]["name"],
                          "remaining": s.get("limitRemaining", 0)}  # /json omits zeros, as upstream
                         for s in answer["statuses"]],
        })

    alice = [descriptor(("generic_key", "global")), descriptor(("path", "/orders")),
             descriptor(("path", "/orders"), ("user", "alice"))]
    v1("v1 first", {"domain": "default", "descriptors": alice})
    v1("v1 spend", {"domain": "default", "descriptors": [
        descriptor(("path", "/orders"), ("user", "alice"), hits=799)]})
    # Over the limit: a decision, HTTP 200; nothing charged on the others.
    v1("v1 denied", {"domain": "default", "descriptors": alice})
    v1("v1 invalid", {"domain": "", "descriptors": alice})

    bob = [descriptor(("path", "/orders"), ("user", "bob"))]
    v3("v3 first", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
       {"domain": "default", "descriptors": bob})
    v3("json spend", "/json", {"domain": "default", "descriptors": bob, "hitsAddend": 799})
    # envoyproxy/ratelimit's /json: HTTP 429 with the answer as the body.
    v3("json denied", "/json", {"domain": "default", "descriptors": bob})

    for line in out:
        print(json.dumps(line))


if __name__ == "__main__":
    main(sys.argv[1])
