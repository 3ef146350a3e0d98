//! A TensorFlow.js graph model (`model.json` topology plus its weight shards) run by a small
//! interpreter over candle tensors on the CPU.
//!
//! Only the operators the detectors in the catalogue use are known; a graph with any other
//! is refused when it loads, never half-run. Weights are read by name from the manifest
//! (float32, float16-quantized or uint8-affine-quantized floats, int32), once, at load. The
//! nodes are put in an order where each one follows its inputs, once, at load; a run walks
//! that order and drops each value after its last use.
//!
//! Layout: the graph says where it transposes. A `Transpose` here is a view (candle's
//! permute copies nothing), so NCHW → NHWC → convolution (candle's is NCHW) → NHWC costs
//! no copy around the convolution; the element-wise operators after it read through the
//! view.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use crate::DetectError;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModelJson {
    model_topology: Topology,
    weights_manifest: Vec<WeightGroup>,
}

#[derive(Debug, Deserialize)]
struct Topology {
    node: Vec<NodeJson>,
}

#[derive(Debug, Deserialize)]
struct NodeJson {
    name: String,
    op: String,
    #[serde(default)]
    input: Vec<String>,
    #[serde(default)]
    attr: HashMap<String, serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct WeightGroup {
    paths: Vec<String>,
    weights: Vec<WeightSpec>,
}

#[derive(Debug, Deserialize)]
struct WeightSpec {
    name: String,
    shape: Vec<usize>,
    dtype: String,
    #[serde(default)]
    quantization: Option<Quantization>,
}

#[derive(Debug, Deserialize)]
struct Quantization {
    dtype: String,
    #[serde(default)]
    scale: Option<f32>,
    #[serde(default)]
    min: Option<f32>,
}

/// A value flowing through the graph: a float tensor, or a small integer array (shapes,
/// paddings, sizes) kept on the host.
#[derive(Debug, Clone)]
enum Value {
    F(Tensor),
    I(Vec<usize>, Vec<i64>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Op {
    Placeholder,
    Const,
    Identity,
    Transpose,
    Pad,
    PadV2,
    /// `oihw`: the filter was laid out as candle's OIHW at load (it is a constant only
    /// convolutions read), instead of the graph's HWIO.
    Conv2D {
        stride: (usize, usize),
        oihw: bool,
    },
    MaxPool {
        kernel: (usize, usize),
        stride: (usize, usize),
    },
    Add,
    LeakyRelu(f32),
    Sigmoid,
    Concat,
    SplitV,
    Reshape,
    ResizeBilinear,
    SparseToDense,
}

#[derive(Debug)]
struct Node {
    name: String,
    op: Op,
    /// (index of the producing node, which of its outputs)
    inputs: Vec<(usize, usize)>,
}

/// A loaded graph, ready to run.
#[derive(Debug)]
pub struct Graph {
    nodes: Vec<Node>,
    /// Node indices in an order where every node follows its inputs (only those the
    /// outputs need).
    order: Vec<usize>,
    consts: HashMap<usize, Value>,
    /// For each node index in `order`, the position in `order` of its last reader.
    last_use: HashMap<usize, usize>,
    input: usize,
    outputs: Vec<(usize, usize)>,
}

fn bad(msg: impl Into<String>) -> DetectError {
    DetectError::Graph(msg.into())
}

/// The integers of an attribute list (`{"list": {"i": ["1","2","2","1"]}}`).
fn int_list(attr: &HashMap<String, serde_json::Value>, key: &str) -> Result<Vec<i64>, DetectError> {
    let list = attr
        .get(key)
        .and_then(|v| v.get("list"))
        .and_then(|l| l.get("i"))
        .and_then(|i| i.as_array())
        .ok_or_else(|| bad(format!("attribute {key} missing")))?;
    list.iter()
        .map(|v| match v {
            serde_json::Value::String(s) => s.parse::<i64>().map_err(|_| bad("bad integer")),
            serde_json::Value::Number(n) => n.as_i64().ok_or_else(|| bad("bad integer")),
            _ => Err(bad("bad integer")),
        })
        .collect()
}

/// A string attribute (base64 in the JSON).
fn str_attr(attr: &HashMap<String, serde_json::Value>, key: &str) -> Option<String> {
    use base64::Engine as _;
    let s = attr.get(key)?.get("s")?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
    String::from_utf8(bytes).ok()
}

fn bool_attr(attr: &HashMap<String, serde_json::Value>, key: &str) -> bool {
    attr.get(key)
        .and_then(|v| v.get("b"))
        .and_then(|b| b.as_bool())
        == Some(true)
}

/// NHWC window attributes `[1, h, w, 1]` as `(h, w)`, checking the layout and padding this
/// interpreter supports.
fn window(
    attr: &HashMap<String, serde_json::Value>,
    key: &str,
    name: &str,
) -> Result<(usize, usize), DetectError> {
    let v = int_list(attr, key)?;
    if v.len() != 4 || v[0] != 1 || v[3] != 1 || v[1] < 1 || v[2] < 1 {
        return Err(bad(format!("{name}: {key} {v:?} not supported")));
    }
    Ok((v[1] as usize, v[2] as usize))
}

fn parse_op(node: &NodeJson) -> Result<Op, DetectError> {
    let a = &node.attr;
    let nhwc_valid = |what: &str| -> Result<(), DetectError> {
        let format = str_attr(a, "data_format").unwrap_or_else(|| "NHWC".into());
        let padding = str_attr(a, "padding").unwrap_or_default();
        if format != "NHWC" || padding != "VALID" {
            return Err(bad(format!(
                "{what} {}: {format}/{padding} not supported",
                node.name
            )));
        }
        Ok(())
    };
    Ok(match node.op.as_str() {
        "Placeholder" => Op::Placeholder,
        "Const" => Op::Const,
        "Identity" => Op::Identity,
        "Transpose" => Op::Transpose,
        "Pad" => Op::Pad,
        "PadV2" => Op::PadV2,
        "Conv2D" => {
            nhwc_valid("Conv2D")?;
            if let Ok(d) = int_list(a, "dilations") {
                if d.iter().any(|&x| x != 1) {
                    return Err(bad(format!("Conv2D {}: dilation not supported", node.name)));
                }
            }
            Op::Conv2D {
                stride: window(a, "strides", &node.name)?,
                oihw: false,
            }
        }
        "MaxPool" => {
            nhwc_valid("MaxPool")?;
            Op::MaxPool {
                kernel: window(a, "ksize", &node.name)?,
                stride: window(a, "strides", &node.name)?,
            }
        }
        "Add" | "AddV2" => Op::Add,
        "LeakyRelu" => Op::LeakyRelu(
            a.get("alpha")
                .and_then(|v| v.get("f"))
                .and_then(|f| f.as_f64())
                .unwrap_or(0.2) as f32,
        ),
        "Sigmoid" => Op::Sigmoid,
        "ConcatV2" => Op::Concat,
        "SplitV" => Op::SplitV,
        "Reshape" => Op::Reshape,
        "ResizeBilinear" => {
            if bool_attr(a, "align_corners") || !bool_attr(a, "half_pixel_centers") {
                return Err(bad(format!(
                    "ResizeBilinear {}: only half-pixel centres are supported",
                    node.name
                )));
            }
            Op::ResizeBilinear
        }
        "SparseToDense" => Op::SparseToDense,
        other => {
            return Err(bad(format!(
                "operator {other} ({}) not supported",
                node.name
            )))
        }
    })
}

/// Reads the weights of the manifest, in its order, from the concatenated shards.
fn read_weights(specs: &[WeightSpec], bytes: &[u8]) -> Result<HashMap<String, Value>, DetectError> {
    let mut out = HashMap::new();
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], DetectError> {
        let end = at.checked_add(n).filter(|&e| e <= bytes.len());
        let end = end.ok_or_else(|| bad("weight data shorter than its manifest"))?;
        let s = &bytes[at..end];
        at = end;
        Ok(s)
    };
    for w in specs {
        let count: usize = w.shape.iter().product();
        let value = match (&w.quantization, w.dtype.as_str()) {
            (None, "float32") => {
                let raw = take(count * 4)?;
                let v: Vec<f32> = raw
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect();
                Value::F(Tensor::from_vec(v, w.shape.clone(), &Device::Cpu)?)
            }
            (Some(q), "float32") if q.dtype == "float16" => {
                let raw = take(count * 2)?;
                let v: Vec<f32> = raw
                    .chunks_exact(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect();
                Value::F(Tensor::from_vec(v, w.shape.clone(), &Device::Cpu)?)
            }
            (Some(q), "float32") if q.dtype == "uint8" => {
                let (scale, min) = (q.scale.unwrap_or(1.0), q.min.unwrap_or(0.0));
                let v: Vec<f32> = take(count)?
                    .iter()
                    .map(|&b| f32::from(b) * scale + min)
                    .collect();
                Value::F(Tensor::from_vec(v, w.shape.clone(), &Device::Cpu)?)
            }
            (None, "int32") => {
                let raw = take(count * 4)?;
                let v: Vec<i64> = raw
                    .chunks_exact(4)
                    .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect();
                Value::I(w.shape.clone(), v)
            }
            (q, dtype) => {
                return Err(bad(format!(
                    "weight {}: {dtype} with {:?} not supported",
                    w.name,
                    q.as_ref().map(|q| &q.dtype)
                )))
            }
        };
        out.insert(w.name.clone(), value);
    }
    if at != bytes.len() {
        return Err(bad("weight data longer than its manifest"));
    }
    Ok(out)
}

impl Graph {
    /// Loads `json` (a graph model's `model.json`) with its weight shards from `dir`, and the
    /// named outputs (`node:index`).
    pub fn load(
        dir: &Path,
        json: &str,
        input: &str,
        outputs: &[&str],
    ) -> Result<Self, DetectError> {
        let model: ModelJson = serde_json::from_str(&std::fs::read_to_string(dir.join(json))?)
            .map_err(|e| bad(format!("{json}: {e}")))?;
        let mut specs = Vec::new();
        let mut bytes = Vec::new();
        for group in model.weights_manifest {
            for p in &group.paths {
                if p.contains("..") || p.starts_with('/') {
                    return Err(bad(format!("weight path {p:?} leaves the model directory")));
                }
                bytes.extend_from_slice(&std::fs::read(dir.join(p))?);
            }
            specs.extend(group.weights);
        }
        let mut weights = read_weights(&specs, &bytes)?;
        drop(bytes);

        let index: HashMap<&str, usize> = model
            .model_topology
            .node
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.as_str(), i))
            .collect();
        let reference = |s: &str| -> Result<(usize, usize), DetectError> {
            let (name, out) = match s.rsplit_once(':') {
                Some((n, o)) => (n, o.parse().map_err(|_| bad(format!("input {s:?}")))?),
                None => (s, 0),
            };
            let i = index
                .get(name)
                .ok_or_else(|| bad(format!("no node {name:?}")))?;
            Ok((*i, out))
        };
        let mut nodes = Vec::with_capacity(model.model_topology.node.len());
        let mut consts = HashMap::new();
        for (i, n) in model.model_topology.node.iter().enumerate() {
            let op = parse_op(n)?;
            if op == Op::Const {
                let v = weights
                    .remove(&n.name)
                    .ok_or_else(|| bad(format!("constant {} has no weights", n.name)))?;
                consts.insert(i, v);
            }
            let inputs = n
                .input
                .iter()
                .filter(|s| !s.starts_with('^'))
                .map(|s| reference(s))
                .collect::<Result<Vec<_>, _>>()?;
            nodes.push(Node {
                name: n.name.clone(),
                op,
                inputs,
            });
        }
        // Filters that only convolutions read are laid out once, here, as candle wants them.
        let mut readers: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
        for (n, node) in nodes.iter().enumerate() {
            for (slot, &(i, _)) in node.inputs.iter().enumerate() {
                readers.entry(i).or_default().push((n, slot));
            }
        }
        for (c, value) in consts.iter_mut() {
            let Some(rs) = readers.get(c) else { continue };
            let only_filters = rs
                .iter()
                .all(|&(n, slot)| slot == 1 && matches!(nodes[n].op, Op::Conv2D { .. }));
            if let (true, Value::F(t)) = (only_filters, &*value) {
                *value = Value::F(t.permute((3, 2, 0, 1))?.contiguous()?);
                for &(n, _) in rs {
                    if let Op::Conv2D { stride, .. } = nodes[n].op {
                        nodes[n].op = Op::Conv2D { stride, oihw: true };
                    }
                }
            }
        }
        let input = reference(input)?.0;
        if nodes[input].op != Op::Placeholder {
            return Err(bad("the input is not a placeholder"));
        }
        let outputs = outputs
            .iter()
            .map(|s| reference(s))
            .collect::<Result<Vec<_>, _>>()?;

        // Depth-first from the outputs, without recursion: a node is placed once all its
        // inputs are.
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Open,
            Done,
        }
        let mut mark = vec![Mark::New; nodes.len()];
        let mut order = Vec::new();
        for &(root, _) in &outputs {
            let mut stack = vec![(root, false)];
            while let Some((n, expanded)) = stack.pop() {
                if expanded {
                    mark[n] = Mark::Done;
                    order.push(n);
                    continue;
                }
                match mark[n] {
                    Mark::Done => continue,
                    Mark::Open => return Err(bad(format!("cycle at {}", nodes[n].name))),
                    Mark::New => {}
                }
                mark[n] = Mark::Open;
                stack.push((n, true));
                for &(i, _) in nodes[n].inputs.iter().rev() {
                    if mark[i] == Mark::Open {
                        return Err(bad(format!("cycle at {}", nodes[i].name)));
                    }
                    if mark[i] == Mark::New {
                        stack.push((i, false));
                    }
                }
            }
        }
        let mut last_use = HashMap::new();
        for (pos, &n) in order.iter().enumerate() {
            for &(i, _) in &nodes[n].inputs {
                last_use.insert(i, pos);
            }
        }
        for &(o, _) in &outputs {
            last_use.insert(o, usize::MAX);
        }
        Ok(Self {
            nodes,
            order,
            consts,
            last_use,
            input,
            outputs,
        })
    }

    /// Runs the graph on one input tensor; the outputs in the order they were named.
    pub fn run(&self, x: Tensor) -> Result<Vec<Tensor>, DetectError> {
        let mut values: HashMap<usize, Vec<Value>> = HashMap::new();
        let mut x = Some(Value::F(x));
        for (pos, &n) in self.order.iter().enumerate() {
            let node = &self.nodes[n];
            let out = if n == self.input {
                vec![x.take().ok_or_else(|| bad("input read twice"))?]
            } else if node.op == Op::Const {
                let v = self.consts.get(&n).ok_or_else(|| bad("constant missing"))?;
                vec![v.clone()]
            } else {
                let args = node
                    .inputs
                    .iter()
                    .map(|&(i, k)| {
                        values
                            .get(&i)
                            .and_then(|v| v.get(k))
                            .ok_or_else(|| bad(format!("{}: input not computed", node.name)))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                eval(node, &args).map_err(|e| bad(format!("{} ({:?}): {e}", node.name, node.op)))?
            };
            values.insert(n, out);
            for &(i, _) in &node.inputs {
                if self.last_use.get(&i) == Some(&pos) {
                    values.remove(&i);
                }
            }
        }
        self.outputs
            .iter()
            .map(|&(n, k)| match values.get(&n).and_then(|v| v.get(k)) {
                Some(Value::F(t)) => Ok(t.contiguous()?),
                _ => Err(bad("an output is not a float tensor")),
            })
            .collect()
    }
}

fn float(v: &Value) -> Result<&Tensor, DetectError> {
    match v {
        Value::F(t) => Ok(t),
        Value::I(..) => Err(bad("expected a float tensor")),
    }
}

fn ints(v: &Value) -> Result<&[i64], DetectError> {
    match v {
        Value::I(_, d) => Ok(d),
        Value::F(_) => Err(bad("expected integers")),
    }
}

fn axis(a: i64, rank: usize) -> Result<usize, DetectError> {
    let r = rank as i64;
    if a < -r || a >= r {
        return Err(bad(format!("axis {a} out of range for rank {rank}")));
    }
    Ok(if a < 0 { (a + r) as usize } else { a as usize })
}

fn arg<'a>(args: &[&'a Value], i: usize) -> Result<&'a Value, DetectError> {
    args.get(i).copied().ok_or_else(|| bad("missing input"))
}

/// Pads each dimension by `(before, after)` pairs with `value`.
fn pad(x: &Tensor, pads: &[i64], value: f32) -> Result<Tensor, DetectError> {
    if pads.len() != 2 * x.rank() || pads.iter().any(|&p| p < 0) {
        return Err(bad("paddings do not fit the tensor"));
    }
    let mut t = x.clone();
    for d in 0..x.rank() {
        let (l, r) = (pads[2 * d] as usize, pads[2 * d + 1] as usize);
        if l == 0 && r == 0 {
            continue;
        }
        if value == 0.0 {
            t = t.pad_with_zeros(d, l, r)?;
        } else {
            let mut parts = Vec::with_capacity(3);
            let mut shape = t.dims().to_vec();
            if l > 0 {
                shape[d] = l;
                parts.push(Tensor::full(value, shape.clone(), t.device())?);
            }
            parts.push(t.clone());
            if r > 0 {
                shape[d] = r;
                parts.push(Tensor::full(value, shape.clone(), t.device())?);
            }
            t = Tensor::cat(&parts, d)?;
        }
    }
    Ok(t)
}

fn eval(node: &Node, args: &[&Value]) -> Result<Vec<Value>, DetectError> {
    let f = |v: Tensor| Ok(vec![Value::F(v)]);
    match node.op {
        Op::Placeholder | Op::Const => Err(bad("evaluated as an operator")),
        Op::Identity => Ok(vec![arg(args, 0)?.clone()]),
        Op::Transpose => {
            let x = float(arg(args, 0)?)?;
            let perm: Vec<usize> = ints(arg(args, 1)?)?
                .iter()
                .map(|&p| axis(p, x.rank()))
                .collect::<Result<_, _>>()?;
            f(x.permute(perm)?)
        }
        Op::Pad => f(pad(float(arg(args, 0)?)?, ints(arg(args, 1)?)?, 0.0)?),
        Op::PadV2 => {
            let c = float(arg(args, 2)?)?.flatten_all()?.to_vec1::<f32>()?;
            let c = *c.first().ok_or_else(|| bad("no constant value"))?;
            f(pad(float(arg(args, 0)?)?, ints(arg(args, 1)?)?, c)?)
        }
        Op::Conv2D { stride, oihw } => {
            let x = float(arg(args, 0)?)?;
            let k = float(arg(args, 1)?)?;
            if stride.0 != stride.1 {
                return Err(bad("unequal strides"));
            }
            // NHWC input and HWIO filter, as candle's NCHW and OIHW views.
            let k = if oihw {
                k.clone()
            } else {
                k.permute((3, 2, 0, 1))?
            };
            let y = x.permute((0, 3, 1, 2))?.conv2d(&k, 0, stride.0, 1, 1)?;
            f(y.permute((0, 2, 3, 1))?)
        }
        Op::MaxPool { kernel, stride } => {
            let x = float(arg(args, 0)?)?.permute((0, 3, 1, 2))?;
            let y = x.max_pool2d_with_stride(kernel, stride)?;
            f(y.permute((0, 2, 3, 1))?)
        }
        Op::Add => match (arg(args, 0)?, arg(args, 1)?) {
            (Value::F(a), Value::F(b)) => f(a.broadcast_add(b)?),
            (Value::I(sa, a), Value::I(sb, b)) if sa == sb => Ok(vec![Value::I(
                sa.clone(),
                a.iter().zip(b).map(|(x, y)| x + y).collect(),
            )]),
            _ => Err(bad("Add of mismatched values")),
        },
        Op::LeakyRelu(alpha) => {
            let x = float(arg(args, 0)?)?;
            f(x.maximum(&(x * f64::from(alpha))?)?)
        }
        Op::Sigmoid => f(candle_nn::ops::sigmoid(float(arg(args, 0)?)?)?),
        Op::Concat => {
            let (last, parts) = args.split_last().ok_or_else(|| bad("no inputs"))?;
            let a = *ints(last)?.first().ok_or_else(|| bad("no axis"))?;
            let parts = parts
                .iter()
                .map(|v| float(v))
                .collect::<Result<Vec<_>, _>>()?;
            let first = parts.first().ok_or_else(|| bad("nothing to join"))?;
            f(Tensor::cat(&parts, axis(a, first.rank())?)?)
        }
        Op::SplitV => {
            let x = float(arg(args, 0)?)?;
            let sizes = ints(arg(args, 1)?)?;
            let a = axis(
                *ints(arg(args, 2)?)?.first().ok_or_else(|| bad("no axis"))?,
                x.rank(),
            )?;
            let mut at = 0usize;
            let mut out = Vec::new();
            for &s in sizes {
                let s = usize::try_from(s).map_err(|_| bad("negative split"))?;
                out.push(Value::F(x.narrow(a, at, s)?));
                at += s;
            }
            if at != x.dim(a)? {
                return Err(bad("splits do not add up"));
            }
            Ok(out)
        }
        Op::Reshape => {
            let x = float(arg(args, 0)?)?;
            let want = ints(arg(args, 1)?)?;
            let known: i64 = want.iter().filter(|&&d| d != -1).product();
            let mut shape = Vec::with_capacity(want.len());
            for &d in want {
                shape.push(if d == -1 {
                    if known <= 0 {
                        return Err(bad("cannot infer a dimension"));
                    }
                    x.elem_count() / known as usize
                } else {
                    usize::try_from(d).map_err(|_| bad("negative dimension"))?
                });
            }
            f(x.reshape(shape)?)
        }
        Op::ResizeBilinear => {
            let x = float(arg(args, 0)?)?;
            let size = ints(arg(args, 1)?)?;
            let [h, w] = size else {
                return Err(bad("size is not (height, width)"));
            };
            let (h, w) = (*h as usize, *w as usize);
            // Half-pixel centres are PyTorch's `align_corners = false`, which candle follows.
            let y = x
                .permute((0, 3, 1, 2))?
                .contiguous()?
                .upsample_bilinear2d(h, w, false)?;
            f(y.permute((0, 2, 3, 1))?)
        }
        Op::SparseToDense => {
            let (ishape, idx) = match arg(args, 0)? {
                Value::I(s, d) => (s.clone(), d.clone()),
                Value::F(_) => return Err(bad("float indices")),
            };
            let shape: Vec<usize> = ints(arg(args, 1)?)?
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| bad("negative dimension")))
                .collect::<Result<_, _>>()?;
            let values = ints(arg(args, 2)?)?;
            let default = ints(arg(args, 3)?)?.first().copied().unwrap_or(0);
            let total: usize = shape.iter().product();
            let mut out = vec![default; total];
            let rank = ishape.get(1).copied().unwrap_or(1).max(1);
            for (k, coords) in idx.chunks(rank).enumerate() {
                let mut at = 0usize;
                for (d, &c) in coords.iter().enumerate() {
                    let c = usize::try_from(c).map_err(|_| bad("negative index"))?;
                    at = at * shape.get(d).copied().unwrap_or(1) + c;
                }
                let v = if values.len() == 1 {
                    values[0]
                } else {
                    values.get(k).copied().unwrap_or(default)
                };
                *out.get_mut(at).ok_or_else(|| bad("index out of range"))? = v;
            }
            Ok(vec![Value::I(shape, out)])
        }
    }
}

/// Float32 input of shape `dims` from host values.
pub fn tensor(values: Vec<f32>, dims: &[usize]) -> Result<Tensor, DetectError> {
    Ok(Tensor::from_vec(values, dims, &Device::Cpu)?.to_dtype(DType::F32)?)
}
