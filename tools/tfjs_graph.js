// What the TensorFlow.js reference runs of the detectors share (tools/nanodet_reference.js,
// tools/centernet_reference.js): loading a graph model from its folder, reading a PPM or JPEG
// image resized for the network, the overlap of two boxes, per-class suppression, and the
// fixture's printing.
const fs = require('fs');
const path = require('path');
const tf = require('@tensorflow/tfjs');
const jpeg = require('jpeg-js');
// TensorFlow.js's WebAssembly backend (XNNPACK, SIMD), when installed: TFJS_BACKEND=wasm.
try {
  require('@tensorflow/tfjs-backend-wasm');
} catch (e) {
  // Only the pure JavaScript `cpu` backend.
}

async function load(dir, name) {
  const json = JSON.parse(fs.readFileSync(path.join(dir, `${name}.json`), 'utf8'));
  const bin = fs.readFileSync(path.join(dir, `${name}.bin`));
  const weightData = bin.buffer.slice(bin.byteOffset, bin.byteOffset + bin.byteLength);
  const handler = {
    load: async () => ({
      modelTopology: json.modelTopology,
      format: json.format,
      generatedBy: json.generatedBy,
      convertedBy: json.convertedBy,
      signature: json.signature,
      weightSpecs: json.weightsManifest.flatMap((g) => g.weights),
      weightData,
    }),
  };
  return tf.loadGraphModel(handler);
}

// A binary PPM (P6, maxval 255, no comments), as the `pixels` example writes it.
function ppm(bytes) {
  const head = bytes.subarray(0, 64).toString('latin1').match(/^P6\s+(\d+)\s+(\d+)\s+255\s/);
  if (!head) throw new Error('not a binary PPM');
  const width = Number(head[1]);
  const height = Number(head[2]);
  return { width, height, data: bytes.subarray(head[0].length, head[0].length + width * height * 3) };
}

// The image resized to `size`×`size` by bilinear interpolation with half-pixel centres, as a
// float [size, size, 3] tensor from 0 to 255.
function resized(file, size) {
  const bytes = fs.readFileSync(file);
  const img = file.endsWith('.ppm') ? ppm(bytes)
    : jpeg.decode(bytes, { useTArray: true, formatAsRGBA: false });
  return tf.tidy(() => {
    const rgb = tf.tensor3d(img.data, [img.height, img.width, 3], 'int32').toFloat();
    return tf.image.resizeBilinear(rgb, [size, size], false, true);
  });
}

function iou(a, b) {
  const w = Math.max(0, Math.min(a[2], b[2]) - Math.max(a[0], b[0]));
  const h = Math.max(0, Math.min(a[3], b[3]) - Math.max(a[1], b[1]));
  const inter = w * h;
  const union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return union > 0 ? inter / union : 0;
}

// Candidates of one class suppressed above `limit` (highest score first).
function suppress(cands, limit) {
  cands.sort((a, b) => b.score - a.score);
  const kept = [];
  for (const c of cands) {
    if (kept.every((k) => k.class !== c.class || iou(k.box, c.box) <= limit)) kept.push(c);
  }
  return kept;
}

// `runs` timed forwards after three warm-up runs; their median, as one JSON line.
async function time(model, x, names) {
  const runs = [];
  for (let r = 0; r < 23; r++) {
    const t0 = process.hrtime.bigint();
    const outs = model.execute(x, names);
    await Promise.all(outs.map((o) => o.data()));
    runs.push(Number(process.hrtime.bigint() - t0) / 1e6);
    outs.forEach((o) => o.dispose());
  }
  const sorted = runs.slice(3).sort((a, b) => a - b);
  console.log(JSON.stringify({ backend: tf.getBackend(), median_ms: sorted[10] }));
}

// One line per image and detection, so that a fixture's diff reads.
function print(fixture) {
  const lines = Object.entries(fixture).map(([name, dets]) =>
    ` ${JSON.stringify(name)}: [\n${dets.map((d) => `  ${JSON.stringify(d)}`).join(',\n')}\n ]`);
  console.log(`{\n${lines.join(',\n')}\n}`);
}

// A reference run's command line: `[--time] MODEL_DIR IMAGE...`. The graph `name` (its
// `NAME.json` and `NAME.bin` in MODEL_DIR) is loaded on the backend TFJS_BACKEND names
// (default `cpu`). With --time, the median forward of `timed` (output names) on the first
// image; else the fixture: for each image, `decode` of the data of `outputs` (output names),
// rounded, printed one line per detection. `input` makes the network's input of an image.
async function reference({ name, input, timed, outputs, decode }) {
  const args = process.argv.slice(2);
  const timing = args[0] === '--time';
  if (timing) args.shift();
  await tf.setBackend(process.env.TFJS_BACKEND || 'cpu');
  const model = await load(args[0], name);
  if (timing) {
    await time(model, input(args[1]), timed);
    return;
  }
  const fixture = {};
  for (const file of args.slice(1)) {
    const x = input(file);
    // One output name comes back as one tensor, not a list of one.
    const outs = [].concat(model.execute(x, outputs));
    const data = await Promise.all(outs.map((o) => o.data()));
    fixture[path.basename(file).replace(/\.[^.]*$/, '')] = decode(data).map(rounded);
    outs.forEach((o) => o.dispose());
    x.dispose();
  }
  print(fixture);
}

// A detection rounded as the fixtures keep it.
function rounded(d) {
  return {
    class: d.class,
    score: Number(d.score.toFixed(5)),
    box: d.box.map((v) => Number(v.toFixed(5))),
  };
}

module.exports = { tf, resized, suppress, reference };
