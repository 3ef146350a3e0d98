//! What the COCO detectors share: COCO's 80 kinds, a detected object, and the per-kind
//! suppression of overlapping boxes.

use engine::backend::iou;

/// COCO's 80 object kinds, in the model's class order.
pub const COCO: [&str; 80] = [
    "person",
    "bicycle",
    "car",
    "motorcycle",
    "airplane",
    "bus",
    "train",
    "truck",
    "boat",
    "traffic light",
    "fire hydrant",
    "stop sign",
    "parking meter",
    "bench",
    "bird",
    "cat",
    "dog",
    "horse",
    "sheep",
    "cow",
    "elephant",
    "bear",
    "zebra",
    "giraffe",
    "backpack",
    "umbrella",
    "handbag",
    "tie",
    "suitcase",
    "frisbee",
    "skis",
    "snowboard",
    "sports ball",
    "kite",
    "baseball bat",
    "baseball glove",
    "skateboard",
    "surfboard",
    "tennis racket",
    "bottle",
    "wine glass",
    "cup",
    "fork",
    "knife",
    "spoon",
    "bowl",
    "banana",
    "apple",
    "sandwich",
    "orange",
    "broccoli",
    "carrot",
    "hot dog",
    "pizza",
    "donut",
    "cake",
    "chair",
    "couch",
    "potted plant",
    "bed",
    "dining table",
    "toilet",
    "tv",
    "laptop",
    "mouse",
    "remote",
    "keyboard",
    "cell phone",
    "microwave",
    "oven",
    "toaster",
    "sink",
    "refrigerator",
    "book",
    "clock",
    "vase",
    "scissors",
    "teddy bear",
    "hair drier",
    "toothbrush",
];

/// One detected object.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Detection {
    /// Index into [`COCO`].
    pub class: usize,
    /// The network's class score (sigmoid), not a calibrated probability.
    pub score: f32,
    /// `[left, top, right, bottom]` as fractions of the picture's width and height.
    #[serde(rename = "box")]
    pub bbox: [f32; 4],
}

impl Detection {
    pub fn label(&self) -> &'static str {
        COCO.get(self.class).copied().unwrap_or("unknown")
    }
}

/// The detections best first, without any that overlaps a better one of its kind by more
/// than `iou_max` (intersection over union).
pub fn suppress(mut found: Vec<Detection>, iou_max: f32) -> Vec<Detection> {
    found.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut kept: Vec<Detection> = Vec::new();
    for d in found {
        if kept
            .iter()
            .all(|k| k.class != d.class || iou(&k.bbox, &d.bbox) <= iou_max)
        {
            kept.push(d);
        }
    }
    kept
}
