//! `/v1/bundle`: several tasks (decisions, classify, embeddings, rerank) in one body. The
//! envelope is decoded here; each task's own body is read by its endpoint's decoder when the
//! task runs, so a bad task fails alone with the status it would have had alone.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::encoder::{ClassifyRequestWire, EmbeddingsRequestWire, RerankRequestWire};
use crate::error::{reason, ProtocolError};
use crate::request::DecisionRequestWire;
use crate::wire::{decode, malformed, BODY};

/// What a task asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    Decisions,
    Classify,
    Embeddings,
    Rerank,
}

impl TaskKind {
    /// The member that carries the task's body, and the result's `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Decisions => "decisions",
            TaskKind::Classify => "classify",
            TaskKind::Embeddings => "embeddings",
            TaskKind::Rerank => "rerank",
        }
    }
}

/// One task: an optional id and exactly one of the four bodies.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BundleTaskWire {
    /// Echoed in the task's result; by default the task's index.
    #[schema(value_type = Option<String>)]
    pub id: Option<Value>,
    #[schema(value_type = Option<DecisionRequestWire>)]
    pub decisions: Option<Value>,
    #[schema(value_type = Option<ClassifyRequestWire>)]
    pub classify: Option<Value>,
    #[schema(value_type = Option<EmbeddingsRequestWire>)]
    pub embeddings: Option<Value>,
    #[schema(value_type = Option<RerankRequestWire>)]
    pub rerank: Option<Value>,
}

/// `options` of a bundle.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BundleOptionsWire {
    /// Past this many milliseconds each task not answered answers 504 `deadline_exceeded`.
    pub deadline_ms: Option<u64>,
}

/// `POST /v1/bundle`.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"tasks": [{"id": "e", "embeddings": {"input": "a text"}}, {"rerank": {"query": "q", "documents": ["d"]}}]}))]
#[serde(deny_unknown_fields)]
pub struct BundleRequestWire {
    #[schema(min_items = 1)]
    pub tasks: Vec<BundleTaskWire>,
    pub options: Option<BundleOptionsWire>,
}

/// One task, checked: its id, what it asks and its body (not yet read).
#[derive(Debug, Clone, PartialEq)]
pub struct BundleTask {
    pub id: Value,
    pub kind: TaskKind,
    pub body: Value,
}

/// A bundle, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleRequest {
    pub tasks: Vec<BundleTask>,
    pub deadline_ms: Option<u64>,
}

impl BundleRequest {
    /// Decode a bundle of at most `max_tasks` tasks. The count is checked before any task is
    /// read (`bundle_tasks`, with the limit).
    pub fn parse(v: &Value, max_tasks: usize) -> Result<Self, ProtocolError> {
        let count = v.get("tasks").and_then(Value::as_array).map_or(0, Vec::len);
        if count > max_tasks {
            let mut e = ProtocolError::invalid(format!(
                "the bundle has {count} tasks; this process takes at most {max_tasks}"
            ))
            .with_reason(reason::BUNDLE_TASKS);
            e.limit = Some(max_tasks as u64);
            return Err(e);
        }
        let w: BundleRequestWire = decode(v, BODY)?;
        if w.tasks.is_empty() {
            return Err(malformed("tasks must be a non-empty list"));
        }
        let tasks = w
            .tasks
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let bodies = [
                    (TaskKind::Decisions, t.decisions),
                    (TaskKind::Classify, t.classify),
                    (TaskKind::Embeddings, t.embeddings),
                    (TaskKind::Rerank, t.rerank),
                ];
                let mut given = bodies.into_iter().filter_map(|(k, b)| b.map(|b| (k, b)));
                match (given.next(), given.next()) {
                    (Some((kind, body)), None) => Ok(BundleTask {
                        id: t.id.unwrap_or_else(|| Value::String(i.to_string())),
                        kind,
                        body,
                    }),
                    _ => Err(malformed(format!(
                        "tasks[{i}] needs exactly one of decisions, classify, embeddings, rerank"
                    ))),
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(BundleRequest {
            tasks,
            deadline_ms: w.options.and_then(|o| o.deadline_ms),
        })
    }
}

// What this module's endpoints answer, for the OpenAPI document (the bodies are written by
// hand, in the order the spec shows).

#[derive(Serialize, ToSchema)]
pub struct BundleResponseDoc {
    /// In task order: `{id, type, status, body}`.
    #[schema(value_type = Vec<Object>)]
    pub results: Vec<Value>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_bundle_names_each_task_and_refuses_what_it_cannot_run() {
        let b = BundleRequest::parse(
            &json!({"tasks": [{"id": "a", "embeddings": {"input": "x"}}, {"rerank": {}}],
                "options": {"deadline_ms": 40}}),
            4,
        )
        .unwrap();
        assert_eq!(b.deadline_ms, Some(40));
        assert_eq!(
            b.tasks
                .iter()
                .map(|t| (t.id.clone(), t.kind))
                .collect::<Vec<_>>(),
            vec![
                (json!("a"), TaskKind::Embeddings),
                (json!("1"), TaskKind::Rerank)
            ]
        );
        for (body, word, says) in [
            (json!({"tasks": []}), reason::BODY_MALFORMED, "non-empty"),
            (json!({}), reason::BODY_MALFORMED, "tasks is required"),
            (
                json!({"tasks": [{"rerank": {}, "classify": {}}]}),
                reason::BODY_MALFORMED,
                "tasks[0] needs exactly one",
            ),
            (
                json!({"tasks": [{"id": 1}]}),
                reason::BODY_MALFORMED,
                "exactly one",
            ),
            (
                json!({"tasks": [{"generate": {}}]}),
                reason::UNKNOWN_MEMBER,
                "\"generate\" in tasks[0]",
            ),
            (
                json!({"tasks": [{"rerank": {}}], "options": {"window": 3}}),
                reason::UNKNOWN_MEMBER,
                "\"window\" in options",
            ),
            (
                json!({"tasks": [{"rerank": {}}], "options": {"deadline_ms": -1}}),
                reason::BODY_MALFORMED,
                "options.deadline_ms",
            ),
            (
                json!({"tasks": vec![json!({"rerank": {}}); 5]}),
                reason::BUNDLE_TASKS,
                "at most 4",
            ),
        ] {
            let e = BundleRequest::parse(&body, 4).unwrap_err();
            assert_eq!(e.reason, Some(word), "{body}: {}", e.message);
            assert!(e.message.contains(says), "{body}: {}", e.message);
        }
    }
}
