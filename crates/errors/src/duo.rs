//! One System One error body for clients of either document: system-duo-api's
//! `{"error": {type, code, message}}` and worker-api's vllm-sr/5.0 flat fields.

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::code::openai_type;

fn kind_of(status: u16) -> &'static str {
    openai_type(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
}

const CARRIED: [&str; 6] = [
    "reason",
    "question",
    "question_error",
    "state",
    "limit",
    "param",
];

/// One System One error body, as a client of either document reads it: system-duo-api's
/// `{"error": {type, code, message}}` (the service's refusals are built that way; a
/// worker's vllm-sr/5.0 body, flat `code`/`message`/`detail`, gains it), and, where
/// `flat` (POST /v1/systemone and its batch, whose worker-api shape is vllm-sr/5.0), the
/// flat `code`, `message`, `detail` and fixed fields beside it (a service refusal gains
/// them). Only members are added; a body that is not a JSON object is left as it is.
pub fn both_shapes(v: &mut Value, status: u16, flat: bool) {
    let Some(body) = v.as_object_mut() else {
        return;
    };
    let detail = body.get("detail");
    let word = |k: &str| {
        detail
            .and_then(|d| d.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let code = body
        .get("code")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| word("error_type"));
    let message = body
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| word("message"));
    if !body.get("error").is_some_and(Value::is_object) {
        let mut error = serde_json::Map::new();
        error.insert("type".into(), json!(kind_of(status)));
        error.insert("code".into(), json!(code.clone().unwrap_or_default()));
        error.insert("message".into(), json!(message.clone().unwrap_or_default()));
        for k in CARRIED {
            if let Some(x) = body.get(k) {
                error.insert(k.into(), x.clone());
            }
        }
        body.insert("error".into(), Value::Object(error));
    }
    let error = body
        .get_mut("error")
        .and_then(Value::as_object_mut)
        .map(|e| {
            e.entry("type").or_insert_with(|| json!(kind_of(status)));
            e.clone()
        })
        .unwrap_or_default();
    if !flat || body.contains_key("code") {
        return;
    }
    let code = error.get("code").cloned().unwrap_or(json!(""));
    let message = error.get("message").cloned().unwrap_or(json!(""));
    for k in CARRIED {
        if let Some(x) = error.get(k).filter(|x| !x.is_null()) {
            body.entry(k).or_insert_with(|| x.clone());
        }
    }
    body.insert("code".into(), code.clone());
    body.insert("message".into(), message.clone());
    body.entry("detail")
        .or_insert_with(|| json!({"error_type": code, "message": message}));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v5_body_gains_the_openai_error_and_keeps_its_own() {
        let mut v = json!({"code": "model_unavailable", "message": "no worker",
            "detail": {"error_type": "model_unavailable", "message": "no worker"}});
        both_shapes(&mut v, 503, true);
        assert_eq!(v["error"]["type"], "server_error");
        assert_eq!(v["error"]["code"], "model_unavailable");
        assert_eq!(v["error"]["message"], "no worker");
        assert_eq!(v["code"], "model_unavailable");
        assert_eq!(v["detail"]["error_type"], "model_unavailable");
    }

    #[test]
    fn a_422_detail_list_keeps_its_flat_words() {
        let mut v = json!({"code": "question_failed", "question": "q", "reason": "question_malformed",
            "message": "set questions do not take ['colour']",
            "detail": [{"loc": ["body", "questions", "q"], "msg": "m", "type": "invalid_question"}]});
        both_shapes(&mut v, 422, true);
        assert_eq!(v["error"]["code"], "question_failed");
        assert_eq!(v["error"]["question"], "q");
        assert_eq!(v["error"]["reason"], "question_malformed");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["detail"].is_array());
    }

    #[test]
    fn a_service_refusal_gains_the_flat_fields_only_where_v5_is_spoken() {
        let base = json!({"error": {"message": "too many", "type": "rate_limit_error", "param": null, "code": "rate_limit_exceeded"}});
        let mut v = base.clone();
        both_shapes(&mut v, 429, true);
        assert_eq!(v["code"], "rate_limit_exceeded");
        assert_eq!(v["message"], "too many");
        assert_eq!(v["detail"]["error_type"], "rate_limit_exceeded");
        assert!(v.get("param").is_none());
        let mut v = base.clone();
        both_shapes(&mut v, 429, false);
        assert_eq!(v, base);
        // The internal shape (/v1/decisions) gains its type.
        let mut v = json!({"error": {"code": "invalid_request", "message": "m"}});
        both_shapes(&mut v, 400, false);
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
}
