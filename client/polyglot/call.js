#!/usr/bin/env node
// Calls ratelimitd from Node on both of its gRPC APIs, ratelimit.v1 and
// Envoy's envoy.service.ratelimit.v3, and prints each decision as one line
// of JSON for polyglot_test.go to check (the same lines as call.py).
//
// Usage: node call.js TARGET DESCRIPTOR_SET PROTO_DIR
//
// Needs @grpc/grpc-js and @grpc/proto-loader (install.sh puts them in
// node_modules here), no generated code: ratelimit.v1 is loaded from the
// project's proto file under PROTO_DIR, Envoy's v3 from DESCRIPTOR_SET, a
// serialized google.protobuf.FileDescriptorSet.
//
// The calls assume a fresh daemon serving the default policy (domain
// "default": global, per-endpoint and per-user-per-endpoint token buckets).
'use strict';

const fs = require('node:fs');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// Field names as in the .proto, 64-bit integers as strings, enums by name,
// defaults filled in, Durations as {seconds, nanos}.
const options = { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true };

function millis(d) {
  return d ? Number(d.seconds) * 1000 + Math.floor(d.nanos / 1e6) : 0;
}

// call makes one unary call and resolves to its line of output.
function call(name, client, request, decode) {
  return new Promise((resolve) => {
    const deadline = new Date(Date.now() + 10_000);
    client.ShouldRateLimit(request, { deadline }, (err, response) => {
      if (err) {
        resolve({ call: name, error: `${grpc.status[err.code]}: ${err.details}` });
      } else {
        resolve({ call: name, ...decode(response) });
      }
    });
  });
}

async function main(target, descriptorSet, protoDir) {
  const creds = grpc.credentials.createInsecure();
  const out = [];

  // ratelimit.v1: the project's own API, from its .proto file.
  const v1 = grpc.loadPackageDefinition(
    protoLoader.loadSync('ratelimit/v1/ratelimit.proto', { ...options, includeDirs: [protoDir] }),
  ).ratelimit.v1;
  const rl = new v1.RateLimitService(target, creds);

  const entries = (...kv) => kv.map(([key, value]) => ({ key, value }));
  // most_restrictive names the status that decided: 1 + its index, 0 for none.
  const v1Decode = (r) => ({
    code: r.overall_code,
    policy: r.most_restrictive ? r.statuses[r.most_restrictive - 1].rule.name : '',
    retry_after_ms: r.retry_after ? millis(r.retry_after) : null,
    statuses: r.statuses.map((s) => ({ code: s.code, rule: s.rule ? s.rule.name : '', remaining: Number(s.remaining) })),
  });

  const global = ['generic_key', 'global'];
  const orders = ['path', '/orders'];
  const alice = [orders, ['user', 'alice']];
  const threeTiers = [{ entries: entries(global) }, { entries: entries(orders) }, { entries: entries(...alice) }];
  const tenant = {
    entries: entries(['tenant', 'acme']),
    limit: { algorithm: 'ALGORITHM_TOKEN_BUCKET', requests: 2, period: { seconds: 60 }, name: 'tenant-quota' },
  };

  out.push(await call('v1 first', rl, { domain: 'default', descriptors: threeTiers }, v1Decode));
  out.push(await call('v1 spend', rl, { domain: 'default', descriptors: [{ entries: entries(...alice), hits: 799 }] }, v1Decode));
  out.push(await call('v1 denied', rl, { domain: 'default', descriptors: threeTiers }, v1Decode));
  out.push(await call('v1 peek', rl, { domain: 'default', descriptors: [{ entries: entries(...alice), hits: 0 }] }, v1Decode));
  out.push(await call('v1 inline', rl, { domain: 'default', descriptors: [tenant], hits: 2 }, v1Decode));
  out.push(await call('v1 inline denied', rl, { domain: 'default', descriptors: [tenant] }, v1Decode));
  out.push(await call('v1 invalid', rl, { domain: '', descriptors: threeTiers }, v1Decode));

  // Envoy's v3 API, as an Envoy proxy calls it, from the descriptor set.
  const v3 = grpc.loadPackageDefinition(
    protoLoader.loadFileDescriptorSetFromBuffer(fs.readFileSync(descriptorSet), options),
  ).envoy.service.ratelimit.v3;
  const envoy = new v3.RateLimitService(target, creds);

  const v3Decode = (r) => ({
    code: r.overall_code,
    retry_after_ms: null,
    statuses: r.statuses.map((s) => ({
      code: s.code,
      rule: s.current_limit ? s.current_limit.name : '',
      remaining: s.limit_remaining,
      reset_ms: millis(s.duration_until_reset),
    })),
  });
  const bob = [orders, ['user', 'bob']];
  const v3Tiers = [{ entries: entries(global) }, { entries: entries(orders) }, { entries: entries(...bob) }];

  out.push(await call('v3 first', envoy, { domain: 'default', descriptors: v3Tiers }, v3Decode));
  out.push(await call('v3 spend', envoy, { domain: 'default', descriptors: [{ entries: entries(...bob) }], hits_addend: 799 }, v3Decode));
  out.push(await call('v3 denied', envoy, { domain: 'default', descriptors: v3Tiers }, v3Decode));
  out.push(await call('v3 invalid', envoy, { domain: '', descriptors: v3Tiers }, v3Decode));

  rl.close();
  envoy.close();
  for (const line of out) {
    console.log(JSON.stringify(line));
  }
}

if (process.argv.length !== 5) {
  console.error('usage: node call.js TARGET DESCRIPTOR_SET PROTO_DIR');
  process.exit(2);
}
main(...process.argv.slice(2)).catch((err) => {
  console.error(err);
  process.exit(1);
});
