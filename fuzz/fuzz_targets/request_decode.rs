//! A decision request as the worker decodes it: any JSON document, in each schema, with a
//! multipart part beside it. No input may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use protocol::assets::Parts;
use protocol::Schema;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let mut parts = Parts::new();
    parts.insert(
        "p".into(),
        bytes::Bytes::copy_from_slice(&data[..data.len().min(64)]),
    );
    for schema in [Schema::V5, Schema::Internal] {
        let _ = protocol::request::parse_decision_body_with(&value, schema, &Parts::new());
        let _ = protocol::request::parse_decision_body_with(&value, schema, &parts);
    }
});
