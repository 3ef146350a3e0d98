// Proof of work for a new key, in a Web Worker: find a decimal nonce such that
// SHA-256(challenge + ":" + nonce) starts with `difficulty` zero bits.
//
// Message in:  {challenge, difficulty, first, stride}
// Messages out: {tried} now and then, then {nonce, tried} once found.
// Each worker tries first, first + stride, first + 2 * stride, ... so that several workers
// share one search without overlap. WebCrypto digests are asked for in batches, so the
// browser runs them back to back instead of waiting on each one; where WebCrypto is missing
// (a page served over plain HTTP to a remote host is not a secure context), the small
// SHA-256 below does the same work.
"use strict";

const BATCH = 256;

function leadingZeroBits(bytes) {
  let bits = 0;
  for (const b of bytes) {
    if (b === 0) {
      bits += 8;
      continue;
    }
    return bits + Math.clz32(b) - 24;
  }
  return bits;
}

// SHA-256 of bytes (FIPS 180-4), for contexts without crypto.subtle.
const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);

function sha256(bytes) {
  const words = ((bytes.length + 9 + 63) >> 6) << 4;
  const m = new Uint32Array(words);
  for (let i = 0; i < bytes.length; i++) m[i >> 2] |= bytes[i] << (24 - (i & 3) * 8);
  m[bytes.length >> 2] |= 0x80 << (24 - (bytes.length & 3) * 8);
  m[words - 1] = bytes.length * 8;
  const h = new Uint32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const w = new Uint32Array(64);
  const rotr = (x, n) => (x >>> n) | (x << (32 - n));
  for (let off = 0; off < words; off += 16) {
    for (let t = 0; t < 16; t++) w[t] = m[off + t];
    for (let t = 16; t < 64; t++) {
      const a = w[t - 15], b = w[t - 2];
      const s0 = rotr(a, 7) ^ rotr(a, 18) ^ (a >>> 3);
      const s1 = rotr(b, 17) ^ rotr(b, 19) ^ (b >>> 10);
      w[t] = (w[t - 16] + s0 + w[t - 7] + s1) | 0;
    }
    let [a, b, c, d, e, f, g, k] = h;
    for (let t = 0; t < 64; t++) {
      const t1 = (k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t]) | 0;
      const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      k = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
  }
  const out = new Uint8Array(32);
  for (let i = 0; i < 32; i++) out[i] = h[i >> 2] >>> (24 - (i & 3) * 8);
  return out;
}

const subtle = self.crypto && self.crypto.subtle;
const encoder = new TextEncoder();

async function digests(texts) {
  if (subtle) {
    const all = await Promise.all(texts.map((t) => subtle.digest("SHA-256", encoder.encode(t))));
    return all.map((d) => new Uint8Array(d));
  }
  return texts.map((t) => sha256(encoder.encode(t)));
}

async function search({ challenge, difficulty, first, stride }) {
  const prefix = challenge + ":";
  let tried = 0;
  let n = first;
  for (;;) {
    const nonces = [];
    for (let i = 0; i < BATCH; i++, n += stride) nonces.push(n);
    const ds = await digests(nonces.map((x) => prefix + x));
    for (let i = 0; i < ds.length; i++) {
      if (leadingZeroBits(ds[i]) >= difficulty) {
        postMessage({ nonce: String(nonces[i]), tried: tried + i + 1 });
        return;
      }
    }
    tried += BATCH;
    postMessage({ tried });
  }
}

self.onmessage = (e) => {
  if (e.data && e.data.selftest !== undefined) {
    // The fallback against WebCrypto on one text (the browser test asks).
    const bytes = encoder.encode(e.data.selftest);
    const hex = (a) => Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
    const ours = hex(sha256(bytes));
    (subtle ? subtle.digest("SHA-256", bytes).then((d) => hex(new Uint8Array(d))) : Promise.resolve(null))
      .then((theirs) => postMessage({ selftest: ours, webcrypto: theirs }));
    return;
  }
  search(e.data);
};
